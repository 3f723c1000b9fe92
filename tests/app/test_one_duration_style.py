"""One duration style everywhere (#33, point 8): ``6 h 57 min``, ``15 min``, ``45 s`` — humantime's
``span`` — in what people read: the notifier's messages (evidence "held for", "window"), the
live view, the run's closing summary. A second style fails here: ``0m00s`` / ``6h00m`` (the
notifier's evidence said so beside summaries saying ``5 h 56 min``), ``2.0 h`` / ``0.3 d``
(``replay-baselines``), whole seconds past a minute (``125 s``).

The alerts are the engine's golden output (tests/fixtures/engine_golden.jsonl): every rule's text
with its real evidence."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from gpuwarden.app.live_view import render
from gpuwarden.app.run_summary import Fired, summary
from gpuwarden.contract import AlertTransition, decode
from gpuwarden.humantime import span
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.render import Locale, render_text
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import load_rules

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "engine_golden.jsonl"
SECOND_STYLE = re.compile(r"\b\d+h\d\dm\b|\b\d+m\d\ds\b|\b\d+\.\d+ ?(?:h|d|min)\b|(?<![\d.,])(?:[6-9]\d|\d{3,}) s\b")


def _golden() -> list[AlertTransition]:
    out = []
    for line in GOLDEN.read_text().splitlines():
        _, _, rest = line.partition(" ")
        if rest.startswith("{"):
            out.append(decode(rest.encode(), AlertTransition))
    return out


def test_the_pattern_catches_each_second_style_and_passes_span() -> None:
    for said in ("held for 0m00s", "window 6h00m", "sd-finetune: 2.0 h", "0.3 d of history", "lag 125 s"):
        assert SECOND_STYLE.search(said), said
    for s in (0, 45, 59, 60, 109.5, 900, 3600, 3660, 86400, 90000):
        assert not SECOND_STYLE.search(span(s)), span(s)


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_notifier_messages_say_durations_in_one_style(language: str) -> None:
    alerts = _golden()
    assert alerts and any(a.evidence.window_s for a in alerts) and any(a.evidence.held_for_s for a in alerts)
    for a in alerts:
        n = Notification(receiver="ops", group_key="g", alerts=[a], reason="new", at=a.ts, id="n")
        title, body = render_text(n, Locale(language))
        assert not SECOND_STYLE.search(title + body), (a.rule, SECOND_STYLE.findall(title + body), body)


def test_the_live_view_and_the_runs_summary_say_durations_in_one_style() -> None:
    engine = Engine(load_rules())
    sim = Simulator("mixed", nodes=2, gpus=4, seed=1, start_ts=1_790_000_000.0, tick_s=10.0)
    fired = Fired()
    while sim.ts < 1_790_000_000.0 + 3 * 3600:
        for t in engine.process_many(sim.step()):
            fired.add(t)
    console = Console(file=io.StringIO(), width=200, height=80, color_system=None)
    console.print(render(engine, sim.ts))
    text = console.file.getvalue() + "\n".join(summary(engine, fired, 3 * 3600, "gpuwarden web"))
    assert "since" in text and "Ran 3 h of event time" in text
    assert not SECOND_STYLE.search(text), SECOND_STYLE.findall(text)
    json.dumps(text)  # plain text, nothing else
