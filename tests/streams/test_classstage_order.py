"""Stage 2 (ClassStage) applies a class's summaries in one order whatever their arrival interleaving.

The summary streams come from stage 1 on simulated runs; "delayed" reorders them the way the
faust topology does after a worker takeover: from ``TAKEOVER`` on, one node's summaries arrive
``LAG`` of event time after the others' (each node's own stay in order).
"""

from __future__ import annotations

from functools import cache

import pytest

from gpuwarden.contract import AlertTransition, InferenceMetrics, StageProgress, TaskSummary, encode
from gpuwarden.producers.simulator import Simulator, sim_node
from gpuwarden.streams.classstage import ClassStage
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine, StageOutput
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.progress import Gate
from gpuwarden.streams.rules import load_rules

T0 = 1_700_000_000.0
TAKEOVER = T0 + 50 * 60
LAG = 3600.0
HOLD = 2 * 3600.0
#: (scenario, nodes): version skew on the multi-node job (the last node runs another driver) and
#: util below the class baseline (deviation) among the faults of ``mixed``; a deviation alone on 4 nodes.
RUNS = [("mixed", 2), ("dataloader-starvation", 4)]
RULES = load_rules(None)


def _config(lateness: float) -> EngineConfig:
    return EngineConfig(observation_period=2700, summary_lateness=lateness)


@cache
def _summaries(scenario: str, nodes: int) -> tuple[TaskSummary, ...]:
    """Stage 1's summaries of 2.5 h (fault onset at 1 h) in the order it produced them."""
    sim = Simulator(scenario, nodes=nodes, gpus=8, seed=0, start_ts=T0, tick_s=5, onset_s=3600)
    stage = NodeStage(RULES, _config(HOLD))
    out = StageOutput([], [])
    for r in sim.run(2.5 * 3600):
        if not isinstance(r, InferenceMetrics):  # stage 1's inputs only
            stage.process(r, out=out)
    return (*out.summaries, *stage.flush().summaries)


def _delayed(sums: tuple[TaskSummary, ...], node: str) -> list[TaskSummary]:
    lag = [s.ts + (LAG if s.node == node and s.ts >= TAKEOVER else 0.0) for s in sums]
    return [sums[i] for i in sorted(range(len(sums)), key=lambda i: (lag[i], i))]


def _run(sums: list[TaskSummary] | tuple[TaskSummary, ...], lateness: float,
         cut: int | None = None, gated: str = "") -> tuple[list[AlertTransition], ClassStage]:
    """Stage 2 over ``sums`` then flush; with ``cut``: dump every class after that many, load into
    a fresh stage and go on there. ``gated``: behind the watermark faust gives it, each node being
    one stage-1 partition that reports progress after each of its summaries; this node is taken
    over at ``TAKEOVER`` (its new worker reports it as catching up, then sends its summaries late)."""
    stage = ClassStage(RULES, _config(lateness))
    nodes = sorted({s.node for s in sums})
    gate = Gate(len(nodes), lateness, EngineConfig().max_source_skew) if gated else None
    marks: dict[str, float] = {}
    took_over = False
    out = []
    for i, s in enumerate(sums):
        if i == cut:
            fresh = ClassStage(RULES, _config(lateness))
            for c in stage.classes():
                fresh.load(c, stage.dump(c))
                assert fresh.dump(c) == stage.dump(c)
            stage = fresh
        if gate is None:
            out += stage.process(s)
            continue
        if s.ts >= TAKEOVER and not took_over:  # the worker that takes the node over reports first
            took_over = True
            gate.update(StageProgress(partition=nodes.index(gated), watermark=marks.get(gated), nodes=1,
                                      catching_up=True))
        out += stage.process(s, gate.value)
        # The node's summaries dated before this one have all come (a node's come in order).
        marks[s.node] = s.ts - 1e-3
        progress = StageProgress(partition=nodes.index(s.node), watermark=marks[s.node], nodes=1,
                                 catching_up=s.node == gated and took_over)
        if gate.update(progress):
            for c in stage.classes():
                out += stage.release(c, gate.value)
    out += stage.flush()
    return out, stage


def _bytes(transitions: list[AlertTransition]) -> dict[str, list[bytes]]:
    """Per task class, in order: a class's order is what stage 2 defines (classes release
    independently; mixed's gpus-unused node runs a class of its own that no lag holds back)."""
    out: dict[str, list[bytes]] = {}
    for t in transitions:
        out.setdefault(t.labels.get("task_class", t.labels.get("task", "")), []).append(encode(t))
    return out


def _stage2_rules() -> set[str]:
    return {r.name for r in RULES.by_scope["class"] + RULES.by_scope["job"] + RULES.by_scope["rank"]}


@pytest.mark.parametrize(("scenario", "nodes"), RUNS)
def test_a_node_lagging_within_the_bound_gives_byte_identical_transitions(scenario: str, nodes: int) -> None:
    sums = _summaries(scenario, nodes)
    delayed = _delayed(sums, sim_node(nodes - 1))
    assert delayed != list(sums)
    in_order, a = _run(sums, HOLD)
    lagging, b = _run(delayed, HOLD)
    assert in_order and _bytes(lagging) == _bytes(in_order)
    assert a.counters() == b.counters() == {"late": 0}


def test_the_runs_exercise_version_skew_and_deviation() -> None:
    fired = set()
    for scenario, nodes in RUNS:
        trs, _ = _run(_summaries(scenario, nodes), HOLD)
        fired |= {t.rule for t in trs}
    assert {"version-skew", "util-below-baseline"} <= fired <= _stage2_rules()


@pytest.mark.parametrize(("scenario", "nodes"), RUNS)
def test_without_the_hold_the_lagging_order_changes_results(scenario: str, nodes: int) -> None:
    sums = _summaries(scenario, nodes)
    in_order, _ = _run(sums, 0.0)
    lagging, stage = _run(_delayed(sums, sim_node(nodes - 1)), 0.0)
    assert _bytes(lagging) != _bytes(in_order)
    assert stage.counters()["late"] > 0


@pytest.mark.parametrize(("scenario", "nodes"), RUNS)
def test_a_partition_catching_up_holds_its_classes_through_the_gate(scenario: str, nodes: int) -> None:
    """Issue #15, defects 3 and 4: with the default bound (5 min) a node 1 h behind gave other
    transitions; behind the stage-1 watermark (its partition reports that it is catching up) the
    classes wait for it and match in-order, across a checkpoint too."""
    sums, node = _summaries(scenario, nodes), sim_node(nodes - 1)
    default = EngineConfig().summary_lateness
    in_order, _ = _run(sums, default)
    ungated, _ = _run(_delayed(sums, node), default)
    assert _bytes(ungated) != _bytes(in_order)
    gated, stage = _run(_delayed(sums, node), default, gated=node)
    assert in_order and _bytes(gated) == _bytes(in_order)
    assert stage.counters() == {"late": 0}
    cut = next(i for i, s in enumerate(_delayed(sums, node)) if s.ts >= TAKEOVER + LAG + 600)
    resumed, _ = _run(_delayed(sums, node), default, cut=cut, gated=node)
    assert _bytes(resumed) == _bytes(in_order)


def test_a_node_not_heard_from_yet_is_waited_for_behind_the_gate() -> None:
    """The contributors' rule alone releases a class's head once every node it knows has passed
    it: a node it has not heard from yet (its partition read later) then came late. The gate
    holds the head until that partition reports."""
    stage = ClassStage(RULES, EngineConfig())
    gate = Gate(2, 300.0, 6 * 3600.0)
    gate.update(StageProgress(partition=0, watermark=120, nodes=1, catching_up=False))
    assert stage.process(_summary(60, "j", "a"), gate.value) == []
    stage.process(_summary(120, "j", "a"), gate.value)
    buffered = lambda: [(s.ts, s.node) for *_, s in stage._classes["train"].buffer]  # noqa: E731
    assert buffered() == [(60.0, "a"), (120.0, "a")]  # partition 1 not heard from: held
    stage.process(_summary(60, "k", "b"), gate.value)  # partition 1's first, later
    assert not gate.update(StageProgress(partition=1, watermark=None, nodes=1, catching_up=True))
    assert gate.update(StageProgress(partition=1, watermark=60, nodes=1, catching_up=True))
    stage.release("train", gate.value)
    assert buffered() == [(120.0, "a")] and stage.counters() == {"late": 0}


@pytest.mark.parametrize(("scenario", "nodes"), RUNS)
def test_dump_and_load_with_summaries_held_continue_exactly(scenario: str, nodes: int) -> None:
    sums = _delayed(_summaries(scenario, nodes), sim_node(nodes - 1))
    # Mid-lag: the lagging node is behind, so its classes hold the others' summaries.
    cut = next(i for i, s in enumerate(sums) if s.ts >= TAKEOVER + LAG + 600)
    probe = ClassStage(RULES, _config(HOLD))
    for s in sums[:cut]:
        probe.process(s)
    assert probe.flush(), "nothing was held at the cut: the test would not exercise the buffer"
    whole, _ = _run(sums, HOLD)
    resumed, _ = _run(sums, HOLD, cut=cut)
    assert _bytes(resumed) == _bytes(whole)


def _summary(ts: float, task_id: str, node: str, driver: str = "550") -> TaskSummary:
    return TaskSummary(ts=ts, task="train", task_id=task_id, node=node, window_s=60, samples=4, gpus=1,
                       stats={"util_gpu": 90.0}, labels={"driver_version": driver, "cuda_version": "12.4"})


def _skewed_job(engine: Engine) -> list:
    """Job j on nodes a and b with different drivers for 10 min; job k (same class) stopped at 60."""
    out = engine.process(_summary(60, "k", "c"))
    for ts in range(60, 660, 60):
        out += engine.process(_summary(ts, "j", "a", "550")) + engine.process(_summary(ts, "j", "b", "535"))
    return out


def test_a_silent_contributor_holds_its_class_until_the_bound_or_flush() -> None:
    held = Engine(config=EngineConfig(summary_lateness=3600))
    assert [t.rule for t in _skewed_job(held)] == []  # k is live: nothing after ts 60 applied
    flushed = held.flush()
    assert [(t.rule, t.state.value) for t in flushed] == [("version-skew", "firing")]
    at_once = _skewed_job(Engine(config=EngineConfig(summary_lateness=0)))
    assert _bytes(flushed) == _bytes(at_once)
    bounded = Engine(config=EngineConfig(summary_lateness=300))  # k stops holding at ts 360
    assert _bytes(_skewed_job(bounded)) == _bytes(at_once)


def test_late_summaries_are_applied_and_counted_duplicates_dropped() -> None:
    engine = Engine(config=EngineConfig(summary_lateness=300))
    _skewed_job(engine)
    assert engine.counters()["summaries_late"] == 0
    engine.process(_summary(30, "m", "d"))  # older than what the class applied: late
    assert engine.counters()["summaries_late"] == 1
    before = engine.classes.dump("train")
    assert engine.process(_summary(600, "j", "a")) == []  # stage 1 sent it again
    assert engine.classes.dump("train") == before
