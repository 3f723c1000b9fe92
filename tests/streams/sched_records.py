"""Hand-built ``scheduler.jobs`` polls and GPU samples for the scheduler-stage tests."""

from __future__ import annotations

from typing import Any

from gpuwarden.contract import GpuProcess, GpuSample, JobState, NodeCapacity, NodeSnapshot, SchedulerJob, \
    SchedulerPoll

CLUSTER = "lab"


def job(job_id: str, state: JobState, ts: float, *, gpus: int = 1, queue: str = "gpu", user: str = "alice",
        submit: float | None = None, start: float | None = None, reason: str = "", restarts: int = 0,
        alloc: dict[str, list[int]] | None = None, **kw: Any) -> SchedulerJob:
    return SchedulerJob(ts=ts, cluster=CLUSTER, scheduler="slurm", job_id=job_id, user=user, account="vision",
                        queue=queue, state=state, reason=reason, submit_time=submit, start_time=start, gpus=gpus,
                        nodes=sorted(alloc or {}), gpu_indices=alloc or {}, restarts=restarts, **kw)


def node(name: str, ts: float, total: int, allocated: int, queue: str = "gpu") -> NodeCapacity:
    return NodeCapacity(ts=ts, cluster=CLUSTER, scheduler="slurm", node=name, partitions=[queue],
                        state="mixed" if allocated else "idle", gpus_total=total, gpus_allocated=allocated)


def poll(ts: float, jobs: list[SchedulerJob], nodes: list[NodeCapacity]) -> list[Any]:
    """One poll as the collector sends it: its jobs, its nodes, then its end."""
    return [*jobs, *nodes, SchedulerPoll(ts=ts, cluster=CLUSTER, scheduler="slurm", jobs=len(jobs),
                                         nodes=len(nodes))]


def samples(node_name: str, ts: float, seq: int, busy: dict[int, float], job_id: str, gpus: int = 8,
            procs_on: list[int] | None = None) -> NodeSnapshot:
    """One node's GPUs: ``busy`` gives a GPU's utilization (others 0); the job's processes (its
    ``slurm_job_id``) on ``procs_on`` (default: the busy ones)."""
    rows = [GpuSample(index=i, uuid=f"GPU-{node_name}-{i}", util_gpu=busy.get(i, 0.0), mem_used_bytes=1 << 30,
                      mem_total_bytes=80 << 30) for i in range(gpus)]
    on = sorted(busy) if procs_on is None else procs_on
    procs = [GpuProcess(pid=100 + i, gpu_index=i, user="alice", slurm_job_id=job_id, task="eval",
                        task_id=f"slurm-{job_id}", used_memory_bytes=1 << 30) for i in on]
    return NodeSnapshot.of(node=node_name, ts=ts, seq=seq, boot_id="b1", agent_version="test", gpus=rows,
                           processes=procs)
