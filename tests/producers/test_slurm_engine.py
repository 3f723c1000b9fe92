"""Acceptance (#19): a real Slurm's polls (scripts/slurm-local: gn1 and gn2, 4 GPUs each) through
the collector and the engine, with simulated GPU samples that carry the real job ids: running,
pending for Resources and for Priority, requeued, fragmentation across the two nodes, and a
job whose GPUs are allocated but idle each give the records and the alerts they should."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gpuwarden.contract import GpuProcess, GpuSample, JobState, NodeSnapshot, SchedulerJob
from gpuwarden.producers.scheduler import Collector
from gpuwarden.producers.slurm import SlurmCli
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from tests.slurm_support import LocalSlurm

CLUSTER = "local"
CONFIG = EngineConfig.model_validate({"scheduler": {"fragmentation_for": "2s", "unused_for": "60s",
                                                    "requeue_info": 1}})


def _polls(slurm: LocalSlurm, n: int, every_s: float = 1.0) -> list[Any]:
    """``n`` real polls by the collector, as it publishes them."""
    records: list[Any] = []
    collector = Collector(SlurmCli(timeout_s=20, env=slurm.env), CLUSTER, "slurm", records.extend, interval_s=every_s)
    for k in range(n):
        assert asyncio.run(collector.poll_once())
        if k < n - 1:
            time.sleep(every_s)
    return records


def _gpu_samples(node: str, start: float, span_s: float, busy: dict[int, str]) -> list[NodeSnapshot]:
    """Simulated samples of ``node``'s 4 GPUs every 5 s: GPU i at 90 % with a process of Slurm job
    ``busy[i]``, the others idle and empty."""
    out = []
    for k in range(int(span_s // 5) + 1):
        rows = [GpuSample(index=i, uuid=f"GPU-{node}-{i}", util_gpu=90.0 if i in busy else 0.0) for i in range(4)]
        procs = [GpuProcess(pid=4000 + i, gpu_index=i, user="root", slurm_job_id=job, task_id=f"slurm-{job}")
                 for i, job in busy.items()]
        out.append(NodeSnapshot.of(node=node, ts=start + 5 * k, seq=k, boot_id="sim", agent_version="test",
                                   gpus=rows, processes=procs))
    return out


def _through_engine(records: list[Any]) -> tuple[Engine, list]:
    engine = Engine(config=CONFIG)
    out = engine.process_many(sorted(records, key=lambda r: r.ts)) + engine.flush()
    return engine, out


def _latest(records: list[Any], job: str) -> SchedulerJob:
    return [r for r in records if isinstance(r, SchedulerJob) and r.job_id == job][-1]


@pytest.mark.slurm
def test_a_requeued_job_is_counted_and_told(slurm: LocalSlurm) -> None:
    slurm.cancel_all()
    job = slurm.sbatch("-J", "requeued", "--gres=gpu:1")
    slurm.wait_state(job, "RUNNING")
    records = _polls(slurm, 1)
    slurm.run("scontrol", "requeue", job)
    records += _polls(slurm, 2)
    slurm.cancel_all()
    assert _latest(records, job).restarts == 1
    engine, out = _through_engine(records)
    requeued = [t for t in out if t.rule == "scheduler-requeued" and t.state.value == "firing"]
    assert [(t.labels["job"], t.tier.value, t.evidence.count) for t in requeued] == [(job, "info", 1)]
    assert engine.scheduler.figures(CLUSTER).requeues >= 1


@pytest.mark.slurm
def test_pending_reasons_fragmentation_and_allocated_but_idle_gpus_give_their_alerts(slurm: LocalSlurm) -> None:
    a, b, big, later = slurm.fragment()
    records = _polls(slurm, 4)
    slurm.cancel_all()
    # The records, as Slurm showed them.
    assert _latest(records, a).gpu_indices == {"gn1": [0, 1]} and _latest(records, a).state is JobState.RUNNING
    assert (_latest(records, big).state, _latest(records, big).reason) == (JobState.PENDING, "Resources")
    assert (_latest(records, later).state, _latest(records, later).reason) == (JobState.PENDING, "Priority")
    # GPU samples of gn1 while job a holds GPUs 0 and 1: its process works on GPU 0 only.
    first = min(r.ts for r in records)
    engine, out = _through_engine(records + _gpu_samples("gn1", first, 150.0, {0: a}))
    figures = engine.scheduler.figures(CLUSTER)
    assert figures.running == 2 and figures.pending == 2
    assert figures.reasons == {"Resources": 1, "Priority": 1}
    assert figures.allocation_rate == 0.5 and figures.fragmented == {big: "gn1: 2 free, gn2: 2 free"}
    assert figures.fragmented.keys() == {big}  # "later" waits on priority behind "big", and is not told
    firing = {(t.rule, t.labels.get("job")): t for t in out if t.state.value == "firing"}
    frag = firing[("scheduler-fragmentation", big)]
    assert frag.tier.value == "attention" and frag.evidence.note == "gn1: 2 free, gn2: 2 free"
    unused = firing[("job-gpus-unused", a)]
    assert unused.tier.value == "attention" and unused.labels["node"] == "gn1" and unused.labels["user"] == "root"
    assert unused.evidence.values == {"allocated": 2.0, "busy": 1.0, "idle": 1.0}
    assert ("job-gpus-unused", b) not in firing  # no samples from gn2: nothing judged, nothing claimed
    # And the pending reasons were judged from the same polls: the queue figures per partition.
    q = figures.queues["gpu"]
    assert (q.pending, q.running) == (2, 2) and q.wait_max_s >= 3.0
