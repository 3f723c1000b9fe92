"""The training-framework tests are opt-in (#33): without ``GW_FRAMEWORKS=1`` they skip naming the
command that runs them, before anything is built or downloaded, CI included; ``make test`` starts
the frameworks venv's build only when asked."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_without_gw_frameworks_the_frameworks_tests_skip_naming_the_command(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "GW_FRAMEWORKS"}
    env.update(CI="true", FRAMEWORKS_VENV=str(tmp_path / "never-built"))  # CI: a build failure would fail them
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "tests/integrations/test_frameworks.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 skipped" in proc.stdout
    assert proc.stdout.count("`make test-frameworks` (or GW_FRAMEWORKS=1 make test)") == 2
    assert not (tmp_path / "never-built").exists()


def test_make_test_builds_the_frameworks_venv_only_when_asked_and_ci_does_not_ask():
    recipe = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "GW_FRAMEWORKS": ""}, timeout=60).stdout
    build = next(line for line in recipe.splitlines() if "scripts/frameworks-venv" in line)
    assert re.search(r'if \[ "\$GW_FRAMEWORKS" = 1 \]; then .*scripts/frameworks-venv', build)
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'export GW_FRAMEWORKS="${GW_FRAMEWORKS:-0}"' in ci
    assert ci.index("GW_FRAMEWORKS") < ci.index("make test")
    frameworks = subprocess.run(["make", "-n", "test-frameworks"], cwd=ROOT, capture_output=True, text=True,
                                timeout=60).stdout
    assert "scripts/frameworks-venv" in frameworks and "GW_FRAMEWORKS=1" in frameworks
