"""The scheduler stage → stage 1 watermark (issue #19): after a backlog, job allocations reach
stage 1 behind the node's samples (through the scheduler stage and a topic), yet
``job-gpus-unused`` gives the one-process Engine's transitions, because stage 1 holds each
evaluation instant until the scheduler stage's progress has passed it; bounded when the scheduler
is silent, immediate when no scheduler partition holds a cluster."""

from __future__ import annotations

import json
from typing import Any

from gpuwarden.contract import JobState as S
from gpuwarden.contract import JobAllocation, NodeSnapshot, StageProgress, encode
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine, NodeStage, StageOutput
from gpuwarden.streams.progress import Gate
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.schedstage import SchedulerStage
from tests.streams.sched_records import job, node, poll, samples

T = 1_700_000_000.0
LATENESS, SKEW = 300.0, 6 * 3600.0


def _records(until: float, span: float) -> list[Any]:
    """Job 77 holds node-00's 8 GPUs and uses 2 until Slurm lets it go at ``until``."""
    out: list[Any] = []
    for k in range(0, int(span), 5):
        out.append(samples("node-00", T + k, k, {0: 90.0, 1: 85.0} if k < until else {}, "77"))
        if k % 30 == 0:
            running = k < until
            out += poll(T + k, [job("77", S.RUNNING, T + k, gpus=8, start=T - 5, alloc={"node-00": list(range(8))})]
                        if running else [], [node("node-00", T + k, 8, 8 if running else 0)])
    return out


def _unused(trs: list) -> list[bytes]:
    return [encode(t) for t in trs if t.rule == "job-gpus-unused"]


def _engine(records: list[Any]) -> list[bytes]:
    eng = Engine()
    return _unused(eng.process_many(records) + eng.flush())


def _stage(gate: Gate) -> NodeStage:
    stage = NodeStage(load_rules(EngineConfig().rules), EngineConfig())
    stage.gate = gate
    return stage


def _allocations(records: list[Any]) -> tuple[list[JobAllocation], float]:
    """The scheduler stage's allocations for ``records``, and its last closed poll."""
    sched, allocs = SchedulerStage(EngineConfig()), []
    for r in records:
        allocs += sched.process(r)[1]
    return allocs, sched.position("lab")[0]


def test_allocations_behind_a_backlog_of_samples_give_the_one_process_transitions() -> None:
    records = _records(2400, 3000)
    want = _engine(records)
    assert [json.loads(t)["state"] for t in want] == ["firing", "resolved"]
    gate = Gate(1, LATENESS, SKEW)  # one scheduler.jobs partition, not heard from yet
    stage, out = _stage(gate), StageOutput([], [])
    for r in records:  # stage 1 reads the whole backlog of samples first
        if isinstance(r, NodeSnapshot):
            stage.process(r, out=out)
    allocs, closed = _allocations(records)
    for a in allocs:  # then the scheduler stage's allocations, all dated behind what it released
        stage.process(a, out=out)
    assert _unused(out.transitions) == []  # waiting for the scheduler's progress
    gate.update(StageProgress(partition=0, watermark=closed, catching_up=False, nodes=1))
    stage.advance("node-00", frozenset(), out)
    assert _unused(out.transitions + stage.flush().transitions) == want


def test_a_silent_scheduler_holds_the_judgement_at_most_its_lateness() -> None:
    records = _records(2400, 3000)
    gate = Gate(1, LATENESS, SKEW)
    gate.update(StageProgress(partition=0, watermark=T, catching_up=False, nodes=1))  # then silent
    stage, out = _stage(gate), StageOutput([], [])
    allocs, _ = _allocations([r for r in records if r.ts <= T])
    for r in [*allocs, *records]:
        if not isinstance(r, NodeSnapshot | JobAllocation):
            continue
        stage.process(r, out=out)
        held = stage.state("node-00").allocs.instants
        if held:
            assert r.ts - held[0][0] <= LATENESS + 60  # judged once the node is past the bound
    assert [t.rule for t in out.transitions if t.rule == "job-gpus-unused"] == ["job-gpus-unused"]


def test_without_a_scheduler_instants_wait_at_most_the_lateness() -> None:
    """Every scheduler.jobs partition holds no cluster: a node keeps at most ``lateness`` of
    instants (an allocation published late within it still applies at its event time)."""
    gate = Gate(2, LATENESS, SKEW)
    for p in (0, 1):  # every scheduler.jobs partition holds no cluster and is caught up
        gate.update(StageProgress(partition=p, watermark=None, catching_up=False, nodes=0))
    stage, out = _stage(gate), StageOutput([], [])
    for r in _records(2400, 3000):
        if isinstance(r, NodeSnapshot):
            stage.process(r, out=out)
            held = stage.state("node-00").allocs.instants
            assert not held or r.ts - held[0][0] <= LATENESS
    assert 0 < len(stage.state("node-00").allocs.instants) <= LATENESS // 30
    assert out.transitions == []
