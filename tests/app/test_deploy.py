"""deploy/systemd: every unit passes ``systemd-analyze verify`` and runs a command the CLI knows."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwarden.app.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
UNITS = sorted((ROOT / "deploy" / "systemd").glob("gpuwarden-*.*"))
INSTALLED = "/usr/local/bin/gpuwarden"


def _exec_start(unit: Path) -> list[str]:
    line = next(x for x in unit.read_text().splitlines() if x.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_every_service_runs_a_command_the_cli_knows() -> None:
    services = [u for u in UNITS if u.suffix == ".service"]
    assert {u.stem for u in services} == {"gpuwarden-agent", "gpuwarden-streams", "gpuwarden-notify",
                                         "gpuwarden-scheduler", "gpuwarden-digest"}
    for unit in services:
        argv = _exec_start(unit)
        assert argv[0] == INSTALLED
        build_parser().parse_args(argv[1:])  # exits on an unknown command or flag
    assert (ROOT / "deploy" / "systemd" / "gpuwarden-digest.timer").exists()


def test_systemd_analyze_verify_passes(tmp_path: Path) -> None:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is missing (apt-get install systemd)")
        pytest.skip("systemd-analyze not installed")
    # The units call the installed command; here it is this virtualenv's.
    here = str(Path(sys.executable).with_name("gpuwarden"))
    copies = []
    for unit in UNITS:
        copy = tmp_path / unit.name
        copy.write_text(unit.read_text().replace(INSTALLED, here))
        copies.append(str(copy))
    p = subprocess.run([tool, "verify", *copies], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
