"""The live view of ``gpuwarden run`` draws from read-only copies of the engine's node state."""

from __future__ import annotations

import io

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


def frame(engine: Engine, now: float) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(render(engine, now))
    return console.file.getvalue()  # type: ignore[attr-defined]


def test_a_frame_shows_each_gpu_and_task_as_the_engine_holds_them():
    engine, now = simulated(nodes=2, gpus=2, span=600)
    text = frame(engine, now)
    rows = [[c.strip() for c in line.split("│")[1:4]] for line in text.splitlines() if "│" in line]
    views = [node_view(engine.nodes.state(n)) for n in engine.nodes.nodes()]
    assert len(views) == 2 and all(len(v.gpus) == 2 for v in views)
    for v in views:
        for g in v.gpus:
            util = g.latest["util_gpu"]
            shown = "-" if util is None else f"{util:.0f}"
            assert [v.node, str(g.index), shown] in rows, (v.node, g.index, text)
        for t in v.tasks:
            assert t.task_id in text
    assert any(v.tasks for v in views)


def test_a_view_is_a_copy():
    engine, _ = simulated(nodes=1, gpus=1, span=120)
    node = engine.nodes.nodes()[0]
    view = node_view(engine.nodes.state(node))
    view.gpus[0].labels["task"] = "changed"  # type: ignore[index]
    assert node_view(engine.nodes.state(node)).gpus[0].labels.get("task") != "changed"
