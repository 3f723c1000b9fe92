"""``gpuwarden run``'s live view in a real pseudo-terminal (tmux) at 200×50 and 80×24.

What the screen shows is read back with ``tmux capture-pane``: human ages (no "21414 s ago"),
the alerts pane present, every alert summary it shows whole (wrapped at word boundaries, not
cut), the event-time clock with a progress bar for ``--duration``, and the line saying alerts
go nowhere. The alerts expected are the ones the run left in its spool, read back afterwards.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from gpuwarden.contract import AlertState, AlertTransition, Topics, decode
from gpuwarden.spool import Spool
from tests.app.terminal_support import last_frame, pane

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
RAW_SECONDS = re.compile(r"\b\d{3,} s\b|\b1?\d{9}\b")  # "21414 s", epoch seconds


def _screen(tmp: Path, width: int, height: int) -> tuple[list[str], list[AlertTransition]]:
    """A 2-hour simulation in a pseudo-terminal of that size; (its last frame, the alerts it left open)."""
    config = tmp / f"c{width}.yaml"
    spool = tmp / f"s{width}.db"
    config.write_text(f"spool: {{path: {spool}}}\n")
    lines = last_frame(f"{GPUWARDEN} run --config {config} --simulate mixed --nodes 2 --gpus 8 --duration 2h "
                       "2>/dev/null", width, height, tmp)
    with Spool(spool) as s:
        last = {t.fingerprint: t for t in (decode(r.value, AlertTransition) for r in s.read(Topics().alerts))}
    return lines, [t for t in last.values() if t.state == AlertState.FIRING]


@pytest.mark.parametrize("width,height", [(200, 50), (80, 24)])
def test_live_view_reads_at_a_glance(tmp_path: Path, width: int, height: int) -> None:
    lines, firing = _screen(tmp_path, width, height)
    text = "\n".join(lines)
    assert firing, "the simulated run left no alert open"
    assert len(lines) <= height and all(len(line) <= width for line in lines)
    assert not RAW_SECONDS.search(text), text
    assert re.search(r"event time \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC .*━.* (1 h 59 min|2 h) of 2 h$", lines[0]), lines[0]
    assert "no receivers configured: shown here only — see gpuwarden test-notify" in text
    assert "..." not in text and "…" not in pane(lines, "Open alerts")
    alerts = re.sub(r"\s+", " ", pane(lines, "Open alerts"))
    shown = [t for t in firing if t.rule in alerts]
    assert shown, alerts
    for t in shown:
        head = " ".join(t.summary.split()[:4])
        if head in alerts:
            assert " ".join(t.summary.split()) in alerts, (t.summary, alerts)
    assert re.search(r"since (\d+ (h|min|s|d)( \d+ (h|min))? ago|just now)", alerts), alerts
    left_out = len(firing) - len([t for t in firing if " ".join(t.summary.split()) in alerts])
    if left_out:
        assert re.search(r"\+ \d+ more alerts", alerts), alerts
