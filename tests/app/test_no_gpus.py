"""``gpuwarden run`` without ``--simulate`` on a box whose NVML fails: a clear error and exit 1,
never a silent simulation (issue #18, defect 6: it paged on-call with the ``mixed`` fleet's
invented ECC errors from ``node-00``)."""

from __future__ import annotations

import pytest

from gpuwarden.app.cli import build_parser
from gpuwarden.app.settings import validate_settings
from gpuwarden.app.standalone import cmd_run
from gpuwarden.producers import nvml


class BrokenDriver(Exception):
    pass


def _fail() -> None:
    raise BrokenDriver("Driver/library version mismatch")


@pytest.mark.parametrize("source", ["auto", "nvml"])
def test_a_failing_nvml_is_an_error_not_a_simulation(monkeypatch, capsys, tmp_path, source: str) -> None:
    monkeypatch.setattr(nvml, "load_nvml", _fail)
    settings = validate_settings({"agent": {"source": source}, "spool": {"path": str(tmp_path / "s.db")}})
    args = build_parser().parse_args(["run", "--duration", "1m", "--json"])
    assert cmd_run(args, settings) == 1
    out = capsys.readouterr()
    assert "cannot open NVML (BrokenDriver: Driver/library version mismatch)" in out.err
    assert "--simulate" in out.err and out.out == ""  # no transition of a simulated fleet


def test_simulate_still_simulates(monkeypatch, capsys, tmp_path) -> None:
    monkeypatch.setattr(nvml, "load_nvml", _fail)
    settings = validate_settings({"spool": {"path": str(tmp_path / "s.db")}})
    args = build_parser().parse_args(["run", "--simulate", "healthy", "--nodes", "1", "--gpus", "1",
                                      "--duration", "2m", "--json"])
    assert cmd_run(args, settings) == 0
