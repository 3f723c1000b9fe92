"""pytest plugin: a real Prometheus Alertmanager for tests marked ``@pytest.mark.alertmanager``.

* ``alertmanager`` (function fixture, :class:`LocalAlertmanager`): ``start(webhook, token_file)``
  runs ``scripts/alertmanager-local start`` in the test's own directory (Debian's package, installed
  by the script when missing) and returns its URL; it is stopped when the test ends. An
  Alertmanager that cannot be started fails the test loudly; it never skips it.
* ``amtool(url, *args)``: Alertmanager's own CLI, JSON output parsed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "scripts" / "alertmanager-local"


class LocalAlertmanager:
    def __init__(self, run_dir: Path) -> None:
        self.env = {**os.environ, "ALERTMANAGER_LOCAL_DIR": str(run_dir)}
        self.url: str | None = None

    def _script(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=600, env=self.env, cwd=REPO_ROOT)

    def start(self, webhook: str, token_file: Path | None = None) -> str:
        args = ["start", "--webhook", webhook] + (["--token-file", str(token_file)] if token_file else [])
        proc = self._script(*args)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines or not lines[-1].startswith("http://"):
            pytest.fail(f"scripts/alertmanager-local start failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}",
                        pytrace=False)
        self.url = lines[-1]
        return self.url

    def stop(self) -> None:
        self._script("stop")


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[LocalAlertmanager]:
    am = LocalAlertmanager(tmp_path / "alertmanager")
    try:
        yield am
    finally:
        am.stop()


def amtool(url: str, *args: str) -> Any:
    """``amtool --alertmanager.url=URL ARGS -o json``, parsed."""
    binary = shutil.which("amtool")
    assert binary, "amtool missing: scripts/alertmanager-local installs prometheus-alertmanager, which has it"
    proc = subprocess.run([binary, f"--alertmanager.url={url}", *args, "-o", "json"], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout or "null")
