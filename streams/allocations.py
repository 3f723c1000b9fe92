"""Stage 1's side of the scheduler join: which jobs hold this node's GPUs, and do they use them.

The scheduler stage sends ``job_allocation/1`` records (key node) when a job's GPUs on a node
change; they go through the node's reorder buffer like its samples, so they apply at their
event time. On Kafka they come through the scheduler stage, behind the node's samples (hours
behind after a backlog), so an evaluation instant is held (``hold``: what the judgement reads)
until the scheduler watermark has passed it (``streams/progress.py``), and judged then after the
allocations dated before it (``judge_through``); in one process the gate is open and an instant
is judged at once. At each evaluation instant each job is judged on this node: of the GPUs it holds,
how many are busy (utilization at least ``IDLE_UTIL`` in the newest bucket), how many idle,
how many have no readings (not judged). "Allocated" is the scheduler's word, "busy" the
GPUs': the pitfall of treating allocated as used. The processes' ``slurm_job_id`` (or pod
name) say which GPUs the job's processes are on: the GPUs of a job whose allocation names no
indices (Kubernetes), and the evidence. A job using none of its GPUs, with its processes on
each of them, is left to the rule pack's ``idle-allocated-gpu`` (the same GPUs, tiered by idle
card-hours).
"""

from __future__ import annotations

import bisect

from gpuwarden.contract import AlertTransition, JobAllocation, decode, encode, simulated_labels
from gpuwarden.streams.coded import Verdict, judge
from gpuwarden.streams.columns import GPU_INDEX, IDLE_UTIL
from gpuwarden.streams.config import SchedulerRules
from gpuwarden.streams.schedtext import RESOLVED, TEXT
from gpuwarden.streams.evaluate import resolve_all
from gpuwarden.streams.statecodec import state

_UTIL = GPU_INDEX.util_gpu
#: Allocations applied that a node remembers, to know a copy (a scheduler-stage worker that took
#: over sends again what was made after the last checkpoint: a few polls' changes).
APPLIED_KEPT = 64


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
    """A node's allocations by job id, the job id each GPU's process carried last, and what waits
    for the scheduler stage's watermark (on Kafka allocations come behind the node's samples)."""

    __slots__ = ("jobs", "gpu_jobs", "instants", "queue", "judged", "applied")

    def __init__(self) -> None:
        self.jobs: dict = {}
        self.gpu_jobs: dict = {}  # GPU index -> job id (slurm_job_id, else namespace/pod)
        self.instants: list = []  # evaluation instants not judged yet: [t, {GPU: util}, {GPU: job id}, simulated]
        self.queue: list = []  # allocations received while instants wait: [ts, job id, released, JSON]
        self.judged = float("-inf")  # the last instant judged
        self.applied: dict = {}  # the newest allocations applied, by "job id/released/ts": copies are dropped


def receive(allocs: NodeAllocations, rec: JobAllocation) -> list[AlertTransition] | None:
    """One allocation record (released by the node's buffer, or behind what it released): applied
    now, or kept for its turn among the instants that wait. None: a copy of one applied (the
    scheduler stage sends again what it made after its last checkpoint)."""
    ts = rec.ts
    if ts < allocs.judged:  # instants after it were judged already
        if _id(rec.job_id, rec.released, ts) in allocs.applied:
            return None
        ts = allocs.judged  # late (the wait for the scheduler ran out): it applies from there on
    if allocs.instants:
        entry = [ts, rec.job_id, rec.released, encode(rec).decode()]
        if entry not in allocs.queue:
            bisect.insort(allocs.queue, entry)
        return []
    return apply(allocs, rec, ts)


def hold(allocs: NodeAllocations, gpus: dict, t: float, simulated: bool) -> None:
    """An evaluation instant of the node (``gpus``: stage 1's GpuState by index), kept with what
    the judgement reads until the scheduler stage has released its allocations up to ``t``."""
    allocs.instants.append([t, {i: gpus[i].win.latest(_UTIL) for i in sorted(gpus)}, dict(allocs.gpu_jobs),
                            simulated])


def judge_through(allocs: NodeAllocations, cfg: SchedulerRules, through: float) -> list[AlertTransition]:
    """Judge the held instants up to ``through``, each after the allocations dated before it."""
    out: list[AlertTransition] = []
    instants, queue = allocs.instants, allocs.queue
    while instants and instants[0][0] <= through:
        t, utils, procs, simulated = instants.pop(0)
        while queue and queue[0][0] < t:
            ts, _, _, raw = queue.pop(0)
            out += apply(allocs, decode(raw.encode(), JobAllocation), ts)
        if allocs.jobs:
            out += evaluate(allocs, utils, procs, cfg, t, simulated)
        allocs.judged = t
    while queue and not instants:  # nothing waits: what came applies now
        ts, _, _, raw = queue.pop(0)
        out += apply(allocs, decode(raw.encode(), JobAllocation), ts)
    return out


def apply(allocs: NodeAllocations, rec: JobAllocation, now: float) -> list[AlertTransition]:
    """One allocation record, in event-time order: a job's GPUs here, or their release."""
    applied = allocs.applied
    applied[_id(rec.job_id, rec.released, rec.ts)] = None
    if len(applied) > APPLIED_KEPT:
        del applied[next(iter(applied))]
    old = allocs.jobs.pop(rec.job_id, None)
    if rec.released:
        return [] if old is None else resolve_all(old.alerts, now)
    new = Allocation(rec)
    if old is not None:
        new.alerts, new.since = old.alerts, old.since
    allocs.jobs[rec.job_id] = new
    return []


def evaluate(allocs: NodeAllocations, utils: dict, procs_of: dict, cfg: SchedulerRules, now: float,
             simulated: bool = False) -> list[AlertTransition]:
    """Judge every job holding GPUs here (``utils``: each GPU's newest utilization, ``procs_of``:
    the job id of each GPU's process, both at ``now``); ``simulated``: the node's records come
    from the simulator, so its alerts say so."""
    out = []
    for jid in sorted(allocs.jobs):
        a = allocs.jobs[jid]
        procs = sorted(i for i, j in procs_of.items() if j == jid)
        held = a.gpus or procs
        a.busy, a.idle = [], []
        for i in held:
            util = utils.get(i)
            if util is not None:
                (a.busy if util >= IDLE_UTIL else a.idle).append(i)
        # A job using none of its GPUs while its processes hold each of them is the rule pack's
        # idle-allocated-gpu case (per GPU, info and then attention by idle card-hours).
        covered = not a.busy and set(a.idle) <= set(procs)
        holds = len(a.idle) >= cfg.unused_min_gpus and not covered
        note = (f"busy GPUs: {_list(a.busy)}; idle GPUs (util < {IDLE_UTIL:.0f} %): {_list(a.idle)}; "
                f"the job's processes on GPUs: {_list(procs)}")
        tier = "attention" if (len(held) or a.count) >= cfg.unused_attention_gpus else "info"
        tr = judge(a.alerts, Verdict(
            "job-gpus-unused", tier, {k: a.labels[k] for k in ("cluster", "job", "node") if k in a.labels},
            simulated_labels(a.labels) if simulated else a.labels, holds, cfg.unused_for,
            *TEXT["job-gpus-unused"],
            {"values": {"allocated": float(len(held) or a.count), "busy": float(len(a.busy)),
                        "idle": float(len(a.idle))}, "note": note}, RESOLVED["job-gpus-unused"]), now)
        if tr is not None:
            out.append(tr)
    return out


def open_slots(allocs: NodeAllocations) -> list:
    return [(fp, s) for a in allocs.jobs.values() for fp, s in a.alerts.items() if s.firing_since is not None]


def _id(job_id: str, released: bool, ts: float) -> str:
    return f"{job_id}/{int(released)}/{ts!r}"


def _list(indices: list[int]) -> str:
    return ",".join(map(str, indices)) or "none"
