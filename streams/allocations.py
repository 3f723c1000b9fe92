"""Stage 1's side of the scheduler join: which jobs hold this node's GPUs, and do they use them.

The scheduler stage sends ``job_allocation/1`` records (key node) when a job's GPUs on a node
change; they go through the node's reorder buffer like its samples, so they apply at their
event time. At each evaluation instant each job is judged on this node: of the GPUs it holds,
how many are busy (utilization at least ``IDLE_UTIL`` in the newest bucket), how many idle,
how many have no readings (not judged). "Allocated" is the scheduler's word, "busy" the
GPUs': the pitfall of treating allocated as used. The processes' ``slurm_job_id`` (or pod
name) say which GPUs the job's processes are on: the GPUs of a job whose allocation names no
indices (Kubernetes), and the evidence. A job using none of its GPUs, with its processes on
each of them, is left to the rule pack's ``idle-allocated-gpu`` (the same GPUs, tiered by idle
card-hours).
"""

from __future__ import annotations

from gpuwarden.contract import AlertTransition, JobAllocation, simulated_labels
from gpuwarden.streams.coded import Verdict, judge
from gpuwarden.streams.columns import GPU_INDEX, IDLE_UTIL
from gpuwarden.streams.config import SchedulerRules
from gpuwarden.streams.schedtext import TEXT
from gpuwarden.streams.evaluate import resolve_all
from gpuwarden.streams.statecodec import state

_UTIL = GPU_INDEX.util_gpu


@state
class Allocation:
    """One job's GPUs on this node, and how it used them at the last evaluation."""

    __slots__ = ("job_id", "labels", "gpus", "count", "since", "busy", "idle", "alerts")

    def __init__(self, rec: JobAllocation) -> None:
        self.job_id = rec.job_id
        self.labels = {k: v for k, v in (("cluster", rec.cluster), ("job", rec.job_id), ("node", rec.node),
                                          ("user", rec.user), ("queue", rec.queue), ("project", rec.account)) if v}
        if rec.simulated:  # the scheduler's records come from the simulator
            self.labels = simulated_labels(self.labels)
        self.gpus, self.count, self.since = list(rec.gpus), rec.count, rec.ts
        self.busy: list[int] = []
        self.idle: list[int] = []
        self.alerts: dict = {}


@state
class NodeAllocations:
    """A node's allocations by job id, and the job id each GPU's process carried last."""

    __slots__ = ("jobs", "gpu_jobs")

    def __init__(self) -> None:
        self.jobs: dict = {}
        self.gpu_jobs: dict = {}  # GPU index -> job id (slurm_job_id, else namespace/pod)


def apply(allocs: NodeAllocations, rec: JobAllocation, now: float) -> list[AlertTransition]:
    """One allocation record, in event-time order: a job's GPUs here, or their release."""
    old = allocs.jobs.pop(rec.job_id, None)
    if rec.released:
        return [] if old is None else resolve_all(old.alerts, now)
    new = Allocation(rec)
    if old is not None:
        new.alerts, new.since = old.alerts, old.since
    allocs.jobs[rec.job_id] = new
    return []


def evaluate(allocs: NodeAllocations, gpus: dict, cfg: SchedulerRules, now: float,
             simulated: bool = False) -> list[AlertTransition]:
    """Judge every job holding GPUs here (``gpus``: stage 1's GpuState by index); ``simulated``:
    the node's records come from the simulator, so its alerts say so."""
    out = []
    for jid in sorted(allocs.jobs):
        a = allocs.jobs[jid]
        held = a.gpus or sorted(i for i, j in allocs.gpu_jobs.items() if j == jid)
        a.busy, a.idle = [], []
        for i in held:
            gs = gpus.get(i)
            util = None if gs is None else gs.win.latest(_UTIL)
            if util is not None:
                (a.busy if util >= IDLE_UTIL else a.idle).append(i)
        procs = sorted(i for i, j in allocs.gpu_jobs.items() if j == jid)
        # A job using none of its GPUs while its processes hold each of them is the rule pack's
        # idle-allocated-gpu case (per GPU, info and then attention by idle card-hours).
        covered = not a.busy and set(a.idle) <= set(procs)
        holds = len(a.idle) >= cfg.unused_min_gpus and not covered
        note = (f"busy: {_list(a.busy)}; idle (util < {IDLE_UTIL:.0f} %): {_list(a.idle)}; "
                f"the job's processes on: {_list(procs)}")
        tr = judge(a.alerts, Verdict(
            "job-gpus-unused", "attention", {k: a.labels[k] for k in ("cluster", "job", "node") if k in a.labels},
            simulated_labels(a.labels) if simulated else a.labels, holds, cfg.unused_for,
            *TEXT["job-gpus-unused"],
            {"values": {"allocated": float(len(held) or a.count), "busy": float(len(a.busy)),
                        "idle": float(len(a.idle))}, "note": note}), now)
        if tr is not None:
            out.append(tr)
    return out


def open_slots(allocs: NodeAllocations) -> list:
    return [(fp, s) for a in allocs.jobs.values() for fp, s in a.alerts.items() if s.firing_since is not None]


def _list(indices: list[int]) -> str:
    return ",".join(map(str, indices)) or "none"
