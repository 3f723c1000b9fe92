"""The frameworks venv (scripts/frameworks-venv) for tests marked ``frameworks``: built once, reused
while its requirement hash holds. Only when asked (``GW_FRAMEWORKS=1``: ``make test-frameworks``, or
``GW_FRAMEWORKS=1 make test``), since it downloads torch, Lightning and transformers (~5.4 GB); else
the tests skip saying so, under ``CI`` too (.ci/run does not ask). Asked, a venv that cannot be
built skips the tests here and fails them under ``CI``, where it must build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORKS = "the training frameworks (torch, Lightning, transformers: ~5.4 GB in .cache/frameworks-venv)"


@pytest.fixture(scope="session")
def frameworks_python() -> str:
    if os.environ.get("GW_FRAMEWORKS") != "1":
        pytest.skip(f"{FRAMEWORKS} not downloaded unless asked: `make test-frameworks` (or GW_FRAMEWORKS=1 make test) "
                    "builds their venv and runs these tests")
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "frameworks-venv")], capture_output=True,
                          text=True, timeout=1800)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        reason = f"scripts/frameworks-venv failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return lines[-1]
