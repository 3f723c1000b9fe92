"""The frameworks venv (scripts/frameworks-venv) for tests marked ``frameworks``: built once, reused
while its requirement hash holds. A venv that cannot be built skips the tests here and fails them
under ``CI``, where it must build."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def frameworks_python() -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "frameworks-venv")], capture_output=True,
                          text=True, timeout=1800)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        reason = f"scripts/frameworks-venv failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}"
        if os.environ.get("CI"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return lines[-1]
