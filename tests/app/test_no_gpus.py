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


def test_no_receiver_is_said_at_start_and_in_the_live_view(tmp_path, monkeypatch) -> None:
    """Issue #18, defect 8: nothing said that alerts went nowhere."""
    import subprocess
    import sys

    from rich.console import Console

    from gpuwarden.app.live_view import render
    from gpuwarden.notifiers.pipeline import NOWHERE, Notifier
    from gpuwarden.streams.engine import Engine

    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 's.db'}\n")
    p = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "run", "--config", str(cfg), "--simulate",
                        "healthy", "--nodes", "1", "--gpus", "1", "--duration", "2m", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and NOWHERE in p.stderr
    settings = validate_settings({"spool": {"path": str(tmp_path / "s.db")}})
    notifier = Notifier(settings, spool=None)
    console = Console(width=200, record=True)
    console.print(render(Engine(), 0.0, notifier.nowhere))
    assert NOWHERE in console.export_text()
    monkeypatch.setenv("GW_TEST_HOOK", "http://127.0.0.1:9/hook")
    with_receiver = validate_settings({"notify": {"receivers": [{"name": "chat", "webhook": {
        "url": {"env": "GW_TEST_HOOK"}}}]}})
    assert Notifier(with_receiver, spool=None).nowhere is None


def test_doctor_says_when_alerts_go_nowhere(capsys, monkeypatch) -> None:
    from gpuwarden.app import doctor

    monkeypatch.setattr(doctor, "run_checks", lambda settings: [])  # the node's own checks: tests/producers
    assert doctor.cmd_doctor(None, validate_settings({})) == 0  # a warning, not a failed node
    from gpuwarden.notifiers.pipeline import NOWHERE

    assert f"[warn] receivers: {NOWHERE}" in capsys.readouterr().out
    monkeypatch.setenv("GW_TEST_HOOK", "http://127.0.0.1:9/hook")
    with_receiver = validate_settings({"notify": {"receivers": [{"name": "chat", "webhook": {
        "url": {"env": "GW_TEST_HOOK"}}}]}})
    assert doctor.cmd_doctor(None, with_receiver) == 0
    assert "[  ok] receivers: 1 configured (chat)" in capsys.readouterr().out
