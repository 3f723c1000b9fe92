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
    # mixed's 2 nodes and gpus-unused's own; the scheduler's unsampled nodes hold no GPUs
    views = [v for v in (node_view(engine.nodes.state(n)) for n in engine.nodes.nodes()) if v.gpus]
    assert len(views) == 3 and all(len(v.gpus) == 2 for v in views)
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
    node = "node-00"  # (the scheduler's unsampled nodes sort before it)
    view = node_view(engine.nodes.state(node))
    view.gpus[0].labels["task"] = "changed"  # type: ignore[index]
    assert node_view(engine.nodes.state(node)).gpus[0].labels.get("task") != "changed"


def test_the_scheduler_panel_shows_queues_pending_reasons_and_allocated_versus_used():
    engine, now = simulated(nodes=2, gpus=4, span=2400)
    text = frame(engine, now)
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if "│" in line]
    assert ["sim", "train", "1", "2"] in [r[:4] for r in rows]  # fragmentation's 4-GPU job waits
    assert "pending: Resources" in text and "job t3 fragmented (tn-0: 2 free, tn-1: 2 free)" in text
    f = engine.scheduler.figures("sim")
    assert f"sim: {f.gpus_allocated}/{f.gpus_total} GPUs allocated" in text
    # gpus-unused: erin's job holds node-02's 4 GPUs and works on 2 (the join of stage 1)
    unused = [r for r in rows if r[:1] == ["node-02"] and r[2:3] == ["erin"]]
    assert [r[3:] for r in unused] == [["4", "2", "2,3"]]
