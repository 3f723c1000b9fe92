"""The live view of ``gpuwarden run`` draws from read-only copies of the engine's node state."""

from __future__ import annotations

import io
import re

from rich.console import Console

from gpuwarden.app.live_view import render
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.view import node_view

T0 = 1_790_000_000.0


def simulated(nodes: int, gpus: int, span: float) -> tuple[Engine, float]:
    """An engine fed ``span`` seconds of the ``mixed`` simulation; returns it and its last time."""
    engine = Engine(load_rules())
    sim = Simulator("mixed", nodes=nodes, gpus=gpus, seed=1, start_ts=T0, tick_s=5.0)
    while sim.ts < T0 + span:
        for rec in sim.step():
            engine.process(rec)
    return engine, sim.ts


def frame(engine: Engine, now: float, width: int = 200, height: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None)
    console.print(render(engine, now))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_frame_shows_each_gpu_and_task_as_the_engine_holds_them():
    engine, now = simulated(nodes=2, gpus=2, span=600)
    text = frame(engine, now)
    views = [node_view(engine.nodes.state(n)) for n in engine.nodes.nodes()]
    assert len(views) == 2 and all(len(v.gpus) == 2 for v in views)
    for v in views:
        for g in v.gpus:
            util = g.latest["util_gpu"]
            shown = "-" if util is None else f"{util:.0f}"
            assert re.search(rf"│ {v.node} +{g.index} +{re.escape(shown)} ", text), (v.node, g.index, text)
        for t in v.tasks:
            assert t.task_id in text
    assert any(v.tasks for v in views)


def test_a_pane_too_short_for_its_rows_says_how_many_it_left_out():
    engine, now = simulated(nodes=2, gpus=8, span=600)
    text = frame(engine, now, width=80, height=24)
    assert len(text.splitlines()) == 23
    assert re.search(r"\+ \d+ more GPUs", text) and "..." not in text


def test_a_registered_pane_is_drawn(monkeypatch):
    from gpuwarden.app import live_view

    monkeypatch.setattr(live_view, "PANES", list(live_view.PANES))
    live_view.register(live_view.Pane("Queues", lambda f: [("gpu-a", "3 waiting")], "queues",
                                      columns=("partition", "jobs")))
    engine, now = simulated(nodes=1, gpus=1, span=120)
    text = frame(engine, now, width=120, height=40)
    assert "Queues" in text and "3 waiting" in text


def test_a_view_is_a_copy():
    engine, _ = simulated(nodes=1, gpus=1, span=120)
    node = engine.nodes.nodes()[0]
    view = node_view(engine.nodes.state(node))
    view.gpus[0].labels["task"] = "changed"  # type: ignore[index]
    assert node_view(engine.nodes.state(node)).gpus[0].labels.get("task") != "changed"
