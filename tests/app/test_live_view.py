"""The live view of ``gpuwarden run`` draws from read-only copies of the engine's node state."""

from __future__ import annotations

import io
import re

from rich.console import Console

from gpuwarden.app.live_view import render
from gpuwarden.producers.simulator import Simulator, sim_node
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
    # mixed's 2 nodes and gpus-unused's own; the scheduler's unsampled nodes hold no GPUs
    views = [v for v in (node_view(engine.nodes.state(n)) for n in engine.nodes.nodes()) if v.gpus]
    assert len(views) == 3 and all(len(v.gpus) == 2 for v in views)
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
    text = frame(engine, now, width=120, height=60)  # mixed fills the inference and scheduler panes too
    assert "Queues" in text and "3 waiting" in text


def test_a_view_is_a_copy():
    engine, _ = simulated(nodes=1, gpus=1, span=120)
    node = sim_node(0)  # (the scheduler's unsampled nodes sort before it)
    view = node_view(engine.nodes.state(node))
    view.gpus[0].labels["task"] = "changed"  # type: ignore[index]
    assert node_view(engine.nodes.state(node)).gpus[0].labels.get("task") != "changed"


def test_the_scheduler_panes_show_queues_pending_reasons_and_allocated_versus_used():
    engine, now = simulated(nodes=2, gpus=4, span=2400)
    text = frame(engine, now, width=220, height=120)
    assert "Scheduler queues" in text and "Allocated vs used" in text
    assert re.search(r"│ sim +train +1 +2 ", text), text  # fragmentation's 4-GPU job waits
    flat = " ".join(text.replace("│", " ").split())  # the cluster notes wrap
    assert "pending: Resources" in flat and "job t3 fragmented (tn-0: 2 free, tn-1: 2 free)" in flat
    f = engine.scheduler.figures("sim")
    assert f"sim: {f.gpus_allocated}/{f.gpus_total} GPUs allocated" in flat
    # gpus-unused: erin's job holds the extra node's 4 GPUs and works on 2 (the join of stage 1)
    assert re.search(rf"│ {sim_node(2)} +\S+ +erin +4 +2 +2,3 ", text), text


def test_the_scheduler_panes_are_left_out_without_a_scheduler():
    from gpuwarden.app.scheduler_view import allocation_rows, queue_rows

    engine = Engine(load_rules())
    sim = Simulator("healthy", nodes=1, gpus=1, seed=1, start_ts=T0, tick_s=5.0)
    while sim.ts < T0 + 120:
        for rec in sim.step():
            engine.process(rec)
    assert queue_rows(engine) == [] and allocation_rows(engine) == []
    assert "Scheduler queues" not in frame(engine, sim.ts)


def test_a_narrow_pane_leaves_columns_out_and_never_cuts_a_word():
    """#33: at 80-100 columns the services and queue panes showed "chat-erro" and "2 h 46 mi"; a
    pane now drops its last columns (and says which) before it would cut a cell."""
    from gpuwarden.app.scheduler_view import queue_rows
    from gpuwarden.app.serving_view import service_rows

    engine, now = simulated(nodes=2, gpus=2, span=3 * 3600)
    services, queues = service_rows(engine), queue_rows(engine)
    assert services and any(r[4] != "-" for r in queues)  # a service, and a partition with jobs waiting
    for width in (80, 100, 140):
        text = frame(engine, now, width=width, height=200)
        words = set(re.split(r"[\s│╭╮╰╯─]+", text))
        for row in services:
            assert row[1] in words, (width, row[1])  # the service's name whole
        for row in queues:
            assert all(w in text for w in row[4:] if w != "-"), (width, row)  # each wait whole, on one line
        if width == 80:
            assert "(too narrow for: model, engine)" in text  # the services' last columns, said
