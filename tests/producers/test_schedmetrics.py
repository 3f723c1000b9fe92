"""The scheduler collector's series, polls in and figures out: the queue per partition and state,
pending waits, GPUs per partition and node, requeues and preemptions between polls, a poll the
scheduler did not answer (tests/integration/test_prometheus_stack.py has a real Slurm's)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob
from gpuwarden.producers.scheduler import Collector
from gpuwarden.producers.schedmetrics import SchedulerMetrics

T = 1_700_000_000.0


def job(jid: str, state: JobState, queue: str = "gpu", **kw: Any) -> SchedulerJob:
    return SchedulerJob(ts=T, cluster="c1", scheduler="slurm", job_id=jid, queue=queue, state=state, **kw)


def node(name: str, total: int, used: int, partitions: list[str]) -> NodeCapacity:
    return NodeCapacity(ts=T, cluster="c1", scheduler="slurm", node=name, partitions=partitions,
                        gpus_total=total, gpus_allocated=used)


class Polls:
    """Answers each poll with the next (jobs, nodes), or raises it when it is an exception."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    async def poll(self, cluster: str, ts: float) -> tuple[list[SchedulerJob], list[NodeCapacity]]:
        a = self.answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a


async def test_each_answered_poll_rebuilds_the_queue_and_counts_what_changed_since_the_last() -> None:
    m = SchedulerMetrics()
    nodes = [node("gn1", 4, 2, ["gpu"]), node("gn2", 4, 4, ["gpu", "debug"])]
    first = [job("1", JobState.RUNNING, submit_time=T - 600, start_time=T - 300, gpus=2),
             job("2", JobState.PENDING, submit_time=T - 100, gpus=4),
             job("3", JobState.PENDING, submit_time=T - 400, eligible_time=T - 200, gpus=4),
             job("4", JobState.RUNNING, queue="", start_time=T - 10)]
    second = [job("1", JobState.PENDING, submit_time=T - 600, restarts=1, gpus=2),  # requeued
              job("2", JobState.PREEMPTED, submit_time=T - 100, start_time=T - 50, gpus=4)]
    c = Collector(Polls((first, nodes), ConnectionError("refused"), (second, nodes[:1])), "c1", "slurm",
                  lambda records: None, clock=lambda: T, polled=m.polled)
    v = m.registry.get_sample_value
    assert await c.poll_once()
    assert v("gpuwarden_scheduler_jobs", {"cluster": "c1", "partition": "gpu", "state": "pending"}) == 2
    assert v("gpuwarden_scheduler_jobs", {"cluster": "c1", "partition": "gpu", "state": "running"}) == 1
    assert v("gpuwarden_scheduler_jobs", {"cluster": "c1", "partition": "none", "state": "pending"}) == 0
    # Waited so far: 100 s (submitted) and 200 s (eligible since); nearest-rank median, 90th, longest.
    waits = {s: v("gpuwarden_scheduler_pending_wait_seconds", {"cluster": "c1", "partition": "gpu", "stat": s})
             for s in ("p50", "p90", "max")}
    assert waits == {"p50": 100, "p90": 200, "max": 200}
    gpus = {s: v("gpuwarden_scheduler_gpus", {"cluster": "c1", "partition": "gpu", "state": s})
            for s in ("total", "allocated", "free")}
    assert gpus == {"total": 8, "allocated": 6, "free": 2}
    assert v("gpuwarden_scheduler_gpus", {"cluster": "c1", "partition": "debug", "state": "free"}) == 0
    assert v("gpuwarden_scheduler_node_gpus", {"cluster": "c1", "node": "gn1", "state": "free"}) == 2
    # Jobs seen started: job 1 waited 300 s (submit to start), job 4 (no submit time) 0.
    assert v("gpuwarden_scheduler_queue_wait_seconds_count", {"cluster": "c1", "partition": "gpu"}) == 1
    assert v("gpuwarden_scheduler_queue_wait_seconds_sum", {"cluster": "c1", "partition": "gpu"}) == 300
    assert v("gpuwarden_scheduler_answering", {"cluster": "c1"}) == 1

    assert not await c.poll_once()  # away: the queue stays as last seen, the outcome is counted
    assert v("gpuwarden_scheduler_answering", {"cluster": "c1"}) == 0
    assert v("gpuwarden_scheduler_polls_total", {"cluster": "c1", "outcome": "error"}) == 1
    assert v("gpuwarden_scheduler_jobs", {"cluster": "c1", "partition": "gpu", "state": "pending"}) == 2

    assert await c.poll_once()
    assert v("gpuwarden_scheduler_requeues_total", {"cluster": "c1", "partition": "gpu"}) == 1
    assert v("gpuwarden_scheduler_preemptions_total", {"cluster": "c1", "partition": "gpu"}) == 1
    # Job 2 started (then was preempted): its 50 s wait counted once; job 1's start is not counted again.
    assert v("gpuwarden_scheduler_queue_wait_seconds_count", {"cluster": "c1", "partition": "gpu"}) == 2
    assert v("gpuwarden_scheduler_jobs", {"cluster": "c1", "partition": "none", "state": "running"}) is None
    assert v("gpuwarden_scheduler_node_gpus", {"cluster": "c1", "node": "gn2", "state": "total"}) is None
    assert v("gpuwarden_scheduler_polls_total", {"cluster": "c1", "outcome": "ok"}) == 2
    assert v("gpuwarden_scheduler_poll_duration_seconds_count", {"cluster": "c1"}) == 3


def test_a_metrics_port_taken_is_said_at_start_before_any_poll(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "scheduler", "--slurm", "--output",
                              str(tmp_path / "jobs.jsonl"), "--metrics-port", str(port), "--polls", "1"],
                             capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    assert f"gpuwarden scheduler: cannot serve /metrics on 127.0.0.1:{port}: Address already in use" in out.stderr
    assert not (tmp_path / "jobs.jsonl").exists()
