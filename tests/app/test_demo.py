"""``gpuwarden demo`` (what ``make demo`` runs), shortened, twice in a row from a fresh directory,
in a 200×50 pseudo-terminal: a class baseline band and a deviation alert on screen both times (in
the alerts pane, or in the closing summary when more urgent alerts fill the pane), and no message
about earlier state the second time."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gpuwarden.contract import AlertState, AlertTransition, Topics, decode
from gpuwarden.spool import Spool
from tests.app.terminal_support import pane, screen

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
BAND = re.compile(r"\d+ \(\d+–\d+ %\)")  # "92 (75–100 %)": median and band, clamped to 100


def test_demo_shows_baselines_and_a_deviation_alert_twice(tmp_path: Path) -> None:
    for attempt in (1, 2):
        log = tmp_path / f"demo{attempt}.log"
        lines, after = screen(f"{GPUWARDEN} demo --simulate --duration 3h 2>{log}", 200, 50, tmp_path)
        said = log.read_text()
        assert "simulated GPUs" in said and "fresh state in var/demo/" in said, said
        assert "earlier run" not in said and "not loaded" not in said, said
        assert BAND.search(pane(lines, "Tasks and class baselines")), "\n".join(lines)
        # the deviation: in the alerts pane when it fits there (critical and older alerts come first),
        # and always in the summary the demo ends with (#33)
        alerts = pane(lines, "Open alerts")
        attention = next(line for line in after if line.startswith("  attention"))
        # the summary names rules up to 100 columns, then "+ N more": the spool's alert log says all
        with Spool(tmp_path / "var" / "demo" / "spool.db") as s:
            fired = {(t.rule, t.tier.value) for r in s.read(Topics().alerts)
                     if (t := decode(r.value, AlertTransition)).state == AlertState.FIRING}
        assert ("util-below-baseline", "attention") in fired, sorted(fired)
        assert "util-below-baseline" in attention or "more" in attention, after
        if "util-below-baseline" in alerts:
            assert "against its class baseline band" in alerts, alerts
        assert (tmp_path / "var" / "demo" / "gpuwarden.yaml").is_file()


def test_without_nvml_the_demo_says_it_simulates(tmp_path: Path, monkeypatch, capsys) -> None:
    from gpuwarden.app import demo
    from gpuwarden.app.cli import build_parser
    from gpuwarden.producers import nvml

    def no_library() -> None:
        raise OSError("NVML Shared Library Not Found")

    monkeypatch.setattr(nvml, "load_nvml", no_library)
    args = build_parser().parse_args(["demo", "--duration", "20m", "--json", "--dir", str(tmp_path / "d")])
    assert demo.cmd_demo(args) == 0
    err = capsys.readouterr().err
    assert "simulated GPUs, because NVML is not available here: OSError: NVML Shared Library Not Found" in err
