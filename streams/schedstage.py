"""The scheduler stage, keyed by cluster: queues, waits, fragmentation, requeues, success rates.

It reads ``scheduler.jobs`` (one collector per cluster: its jobs and nodes at each poll, closed
by the poll's ``scheduler_poll/1``). A poll is judged whole, at its own ``ts`` (event time):
records of a poll are gathered until its poll record has come and every job and node it
counts with it (they may arrive out of order, within a poll: a replay's jitter); a record of a
poll already closed is late (dropped, counted: a copy, or too late), and an older poll still
open when a newer one closes is dropped (``incomplete``: records lost). An error poll (the scheduler did not answer) changes nothing: "scheduler
away" is not "queue empty".

Per poll it keeps the figures of docs/scheduler.md (``ClusterFigures``: queue length and
waits per partition and per GPU count, allocation rate, pending reasons, fragmentation,
requeues, queue versus compute time per user), folds what jobs did into per-class baselines
(class = partition × GPUs requested: the waits of jobs that started, the outcomes of jobs
that ended), and judges the default rules (``engine.scheduler``). Allocations go out as
``job_allocation/1`` records keyed by node, to stage 1, which has the GPUs' utilization and
judges "allocated but not used" (``gpuwarden.streams.allocations``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from gpuwarden.contract import SCHEDULER_RECORDS, AlertTransition, JobAllocation, JobState, NodeCapacity, \
    SchedulerJob, SchedulerPoll, decode, encode, simulated_labels
from gpuwarden.streams import statecodec
from gpuwarden.streams.alerts import AlertSlot
from gpuwarden.streams.baseline import median, median_mad
from gpuwarden.streams.coded import Verdict, judge_all
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.schedtext import RESOLVED, TEXT
from gpuwarden.streams.evaluate import resolve_all
from gpuwarden.streams.statecodec import state

#: Ended states that say whether the job did its work (cancelled says nothing: left out).
OUTCOME = {JobState.COMPLETED: 1.0, JobState.FAILED: 0.0, JobState.TIMEOUT: 0.0, JobState.NODE_FAIL: 0.0,
           JobState.OUT_OF_MEMORY: 0.0}
ENDED = frozenset(OUTCOME) | {JobState.CANCELLED}
#: Pending reasons that say the job waits for resources (not behind another job, a begin time, a hold).
RESOURCE_REASONS = ("Resources", "Unschedulable")
#: Node states whose free GPUs no job can get.
UNUSABLE = ("down", "drain", "fail", "maint", "unknown", "cordoned", "notready")


@state
class JobTrack:
    """One job across polls: its times so far (event time, between polls) and its requeues."""

    __slots__ = ("job_id", "user", "account", "queue", "gpus", "state", "reason", "wait_from", "started",
                 "queue_s", "compute_s", "requeues", "alloc", "alerts")

    def __init__(self, job: SchedulerJob) -> None:
        self.job_id, self.user, self.account, self.queue = job.job_id, job.user, job.account, job.queue
        self.gpus, self.state, self.reason = job.gpus, "", ""
        self.wait_from = job.eligible_time or job.submit_time or job.ts
        self.started = False  # its first start was folded into the class's waits
        self.queue_s = self.compute_s = 0.0
        self.requeues = 0
        self.alloc: dict = {}  # node -> GPU indices, as last sent to stage 1
        self.alerts: dict = {}


@state
class ClassTrack:
    """A class (partition × GPUs requested): waits of started jobs, outcomes of ended ones."""

    __slots__ = ("waits", "outcomes", "alerts")

    def __init__(self, keep: int) -> None:
        self.waits: deque = deque(maxlen=keep)
        self.outcomes: deque = deque(maxlen=keep)
        self.alerts: dict = {}


@state
class QueueFigures:
    """Pending and running jobs of one partition (or one GPU count) at a poll, waits in seconds."""

    __slots__ = ("pending", "running", "wait_p50_s", "wait_p90_s", "wait_max_s")

    def __init__(self) -> None:
        self.pending = self.running = 0
        self.wait_p50_s = self.wait_p90_s = self.wait_max_s = 0.0


@state
class ClusterFigures:
    """One cluster at its last poll: what the live view and the digest show (docs/scheduler.md)."""

    __slots__ = ("ts", "pending", "running", "gpus_total", "gpus_allocated", "queues", "by_gpus", "reasons",
                 "fragmented", "requeues", "users", "jobs", "baselines")

    def __init__(self, ts: float) -> None:
        self.ts = ts
        self.pending = self.running = self.gpus_total = self.gpus_allocated = 0
        self.queues: dict = {}  # partition -> QueueFigures
        self.by_gpus: dict = {}  # GPUs requested -> QueueFigures
        self.reasons: dict = {}  # pending reason -> jobs
        self.fragmented: dict = {}  # job id -> note: the nodes and their free GPUs
        self.requeues = 0
        self.users: dict = {}  # user -> [queue s, compute s] of the jobs in view
        self.jobs: dict = {}  # job id -> [queue s, compute s]
        self.baselines: dict = {}  # class ("partition/gpus") -> median wait (s) of its started jobs

    @property
    def allocation_rate(self) -> float | None:
        return self.gpus_allocated / self.gpus_total if self.gpus_total else None


@state
class OpenPoll:
    """A poll's records so far, and its end once it came (the counts that close it)."""

    __slots__ = ("jobs", "nodes", "end")

    def __init__(self) -> None:
        self.jobs: dict[str, SchedulerJob] = {}
        self.nodes: dict[str, NodeCapacity] = {}
        self.end: SchedulerPoll | None = None

    def complete(self) -> bool:
        e = self.end
        return e is not None and (bool(e.error) or (len(self.jobs) == e.jobs and len(self.nodes) == e.nodes))

    # Compact state: the records as their wire JSON (a checkpoint of a deep queue's open poll).
    def __getstate__(self) -> dict:
        return {"records": [encode(r).decode() for r in (*self.jobs.values(), *self.nodes.values(),
                                                           *(() if self.end is None else (self.end,)))]}

    def __setstate__(self, s: dict) -> None:
        self.jobs, self.nodes, self.end = {}, {}, None
        for raw in s["records"]:
            add(self, decode(raw, SCHEDULER_RECORDS))


def add(poll: OpenPoll, record: SchedulerJob | NodeCapacity | SchedulerPoll) -> None:
    if isinstance(record, SchedulerJob):
        poll.jobs[record.job_id] = record
    elif isinstance(record, NodeCapacity):
        poll.nodes[record.node] = record
    else:
        poll.end = record


@state
class ClusterState:
    __slots__ = ("cluster", "simulated", "closed", "open", "jobs", "ended", "classes", "figures", "late",
                 "incomplete")

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.simulated = False  # its records come from the simulator: its alerts and allocations say so
        self.closed = float("-inf")  # ts of the last closed poll
        self.open: dict = {}  # poll ts -> OpenPoll
        self.jobs: dict = {}  # job id -> JobTrack
        self.ended: dict = {}  # job id -> when judged ended, while the scheduler still lists it (MinJobAge)
        self.classes: dict = {}  # "partition/gpus" -> ClassTrack
        self.figures: ClusterFigures | None = None
        self.late = self.incomplete = 0


class SchedulerStage:
    """The stage's pure object: ``process(record)`` → transitions and allocation records."""

    def __init__(self, config: EngineConfig) -> None:
        self.cfg = config.scheduler
        self._clusters: dict[str, ClusterState] = {}

    # ------------------------------------------------------------------ state

    def clusters(self) -> list[str]:
        return sorted(self._clusters)

    def figures(self, cluster: str) -> ClusterFigures | None:
        st = self._clusters.get(cluster)
        return None if st is None else st.figures

    def dump(self, cluster: str) -> bytes:
        return statecodec.dumps(self._clusters[cluster])

    def load(self, cluster: str, data: bytes) -> None:
        self._clusters[cluster] = statecodec.loads(data)

    def drop(self, cluster: str) -> None:
        self._clusters.pop(cluster, None)

    def position(self, cluster: str) -> tuple[float, float]:
        """``(released, newest)``: the ts of the cluster's last closed poll (its allocations up to
        there are sent) and of its newest record (the scheduler stage's watermark, progress.py)."""
        st = self._clusters[cluster]
        return st.closed, max([st.closed, *st.open])

    def counters(self) -> dict[str, int]:
        return {"scheduler_late": sum(s.late for s in self._clusters.values()),
                "scheduler_incomplete": sum(s.incomplete for s in self._clusters.values())}

    def open_slots(self) -> list[tuple[str, AlertSlot]]:
        out = []
        for c in self.clusters():
            st = self._clusters[c]
            owners = [*(t.alerts for t in st.classes.values()), *(j.alerts for j in st.jobs.values())]
            out.extend((fp, s) for a in owners for fp, s in a.items() if s.firing_since is not None)
        return out

    # ------------------------------------------------------------------ input

    def process(self, record: Any) -> tuple[list[AlertTransition], list[JobAllocation]]:
        """Take one ``scheduler.jobs`` record; at a poll's end, what it changed."""
        if not isinstance(record, (SchedulerJob, NodeCapacity, SchedulerPoll)):
            return [], []
        st = self._clusters.get(record.cluster)
        if st is None:
            st = self._clusters[record.cluster] = ClusterState(record.cluster)
        if record.simulated:
            st.simulated = True
        if record.ts <= st.closed:
            st.late += 1
            return [], []
        poll = st.open.get(record.ts)
        if poll is None:
            poll = st.open[record.ts] = OpenPoll()
        add(poll, record)
        if not poll.complete():
            return [], []
        del st.open[record.ts]
        for ts in [t for t in st.open if t < record.ts]:
            del st.open[ts]
            st.incomplete += 1
        st.closed = record.ts
        if poll.end is None or poll.end.error:
            return [], []
        return self._poll(st, record.ts, poll.jobs, poll.nodes)

    # ------------------------------------------------------------------ per poll

    def _poll(self, st: ClusterState, t: float, jobs: dict[str, SchedulerJob],
              nodes: dict[str, NodeCapacity]) -> tuple[list[AlertTransition], list[JobAllocation]]:
        trs: list[AlertTransition] = []
        allocs: list[JobAllocation] = []
        dt = 0.0 if st.figures is None else max(0.0, t - st.figures.ts)
        st.ended = {j: ts for j, ts in st.ended.items() if j in jobs}
        for jid in sorted(jobs):
            job = jobs[jid]
            if jid in st.ended:
                continue  # its outcome is counted already
            track = st.jobs.get(jid)
            if track is None:
                track = st.jobs[jid] = JobTrack(job)
                if job.start_time is not None:  # seen first while running (or after): its wait is known
                    track.queue_s = max(0.0, job.start_time - track.wait_from)
                    track.compute_s = max(0.0, t - job.start_time) if job.state == JobState.RUNNING else 0.0
                else:
                    track.queue_s = max(0.0, t - track.wait_from)
            else:
                if track.state == JobState.PENDING:
                    track.queue_s += dt
                elif track.state == JobState.RUNNING:
                    track.compute_s += dt
                if track.state == JobState.RUNNING and job.state in (JobState.PENDING, JobState.PREEMPTED):
                    track.requeues += 1
            self._fold_start(st, track, job)
            track.state, track.reason, track.gpus = job.state.value, job.reason, job.gpus
            track.requeues = max(track.requeues, job.restarts)
            allocs.extend(self._allocate(st, track, job, t))
            if job.state in ENDED:
                st.ended[jid] = t
                outcome = OUTCOME.get(job.state)
                if outcome is not None:
                    self._class(st, track).outcomes.append(outcome)
        figures = self._figures(st, t, jobs, nodes)
        for jid in sorted(st.jobs):
            track = st.jobs[jid]
            job = jobs.get(jid)
            if job is not None and job.state not in ENDED:
                trs.extend(self._judge_job(st, track, figures, t, nodes))
            else:  # ended, or gone from the scheduler's view (a whole poll without it)
                trs.extend(resolve_all(track.alerts, t))
                allocs.extend(self._release(st, track, t))
                del st.jobs[jid]
        for key in sorted(st.classes):
            trs.extend(self._judge_class(st, key, figures, t))
        st.figures = figures
        return trs, allocs

    def _class(self, st: ClusterState, track: JobTrack) -> ClassTrack:
        key = class_key(track.queue, track.gpus)
        c = st.classes.get(key)
        if c is None:
            c = st.classes[key] = ClassTrack(self.cfg.job_history)
        return c

    def _fold_start(self, st: ClusterState, track: JobTrack, job: SchedulerJob) -> None:
        if track.started or job.start_time is None or job.state == JobState.PENDING:
            return
        track.started = True
        self._class(st, track).waits.append(max(0.0, job.start_time - track.wait_from))

    def _allocate(self, st: ClusterState, track: JobTrack, job: SchedulerJob, t: float) -> list[JobAllocation]:
        if job.state != JobState.RUNNING:
            return self._release(st, track, t)
        want = {n: sorted(job.gpu_indices.get(n, [])) for n in job.nodes}
        out = []
        for node in sorted(want):
            if track.alloc.get(node) != want[node]:
                count = len(want[node]) or (job.gpus // max(1, len(want)))
                out.append(JobAllocation(ts=t, cluster=st.cluster, node=node, job_id=job.job_id, user=job.user,
                                         account=job.account, queue=job.queue, gpus=want[node], count=count,
                                         simulated=st.simulated))
        gone = sorted(set(track.alloc) - set(want))
        out.extend(self._released(st, track, gone, t))
        track.alloc = want
        return out

    def _release(self, st: ClusterState, track: JobTrack, t: float) -> list[JobAllocation]:
        out = self._released(st, track, sorted(track.alloc), t)
        track.alloc = {}
        return out

    @staticmethod
    def _released(st: ClusterState, track: JobTrack, nodes: list[str], t: float) -> list[JobAllocation]:
        return [JobAllocation(ts=t, cluster=st.cluster, node=n, job_id=track.job_id, user=track.user,
                              account=track.account, queue=track.queue, released=True, simulated=st.simulated)
                for n in nodes]

    # ------------------------------------------------------------------ figures

    def _figures(self, st: ClusterState, t: float, jobs: dict[str, SchedulerJob],
                 nodes: dict[str, NodeCapacity]) -> ClusterFigures:
        f = ClusterFigures(t)
        usable_nodes = {n: c for n, c in nodes.items() if usable(c)}
        f.gpus_total = sum(c.gpus_total for c in nodes.values())
        f.gpus_allocated = sum(min(c.gpus_allocated, c.gpus_total) for c in nodes.values())
        waits: dict[tuple[str, str], list[float]] = {}
        for jid in sorted(jobs):
            job, track = jobs[jid], st.jobs.get(jid)
            if track is None or job.state in ENDED:
                continue
            pending = job.state == JobState.PENDING
            f.pending += pending
            f.running += job.state == JobState.RUNNING
            f.requeues += track.requeues
            for kind, key in (("queue", job.queue), ("gpus", str(job.gpus))):
                table = f.queues if kind == "queue" else f.by_gpus
                q = table.get(key)
                if q is None:
                    q = table[key] = QueueFigures()
                q.pending += pending
                q.running += job.state == JobState.RUNNING
                if pending:
                    waits.setdefault((kind, key), []).append(t - track.wait_from)
            if pending:
                reason = job.reason or "unknown"
                f.reasons[reason] = f.reasons.get(reason, 0) + 1
                note = fragmented(job, usable_nodes)
                if note:
                    f.fragmented[jid] = note
            f.jobs[jid] = [track.queue_s, track.compute_s]
            u = f.users.setdefault(job.user or "?", [0.0, 0.0])
            u[0] += track.queue_s
            u[1] += track.compute_s
        for (kind, key), ws in waits.items():
            q = (f.queues if kind == "queue" else f.by_gpus)[key]
            ws.sort()
            q.wait_p50_s, q.wait_p90_s, q.wait_max_s = median(ws), _quantile(ws, 0.9), ws[-1]
        for key in sorted(st.classes):
            c = st.classes[key]
            if len(c.waits) >= self.cfg.wait_baseline_min:
                f.baselines[key] = median(list(c.waits))
        return f

    # ------------------------------------------------------------------ rules

    def _judge_job(self, st: ClusterState, track: JobTrack, f: ClusterFigures, t: float,
                   nodes: dict[str, NodeCapacity]) -> list[AlertTransition]:
        cfg = self.cfg
        ident = {"cluster": st.cluster, "job": track.job_id}
        labels = {**ident, "user": track.user, "queue": track.queue}
        if track.account:
            labels["project"] = track.account
        labels = _mark(st, labels)
        note = f.fragmented.get(track.job_id, "")
        n = track.requeues
        frag: dict = {"values": {"gpus": float(track.gpus), "free": _free(note)}, "note": note}
        if not note and "scheduler-fragmentation" in {s.rule for s in track.alerts.values()}:
            # no longer fragmented: the figures of its resolve (the job started, or the free GPUs now)
            free = free_gpus(track.queue, {k: c for k, c in nodes.items() if usable(c)})
            frag = {"values": {"gpus": float(track.gpus), "free": float(sum(free.values())),
                               "most": float(max(free.values(), default=0))},
                    "note": "the job started" if track.state == JobState.RUNNING else
                    "still pending; " + (", ".join(f"{m}: {k} free" for m, k in sorted(free.items()) if k) or
                                         "no GPU free")}
        verdicts = [
            Verdict("scheduler-fragmentation", "attention", ident, labels, bool(note), cfg.fragmentation_for,
                    *TEXT["scheduler-fragmentation"], frag, RESOLVED["scheduler-fragmentation"]),
            Verdict("scheduler-requeued", "info", ident, labels, cfg.requeue_info <= n < cfg.requeue_attention,
                    0.0, *TEXT["scheduler-requeued"],
                    {"values": {"requeues": float(n), "attention": float(cfg.requeue_attention)}, "count": n}),
            Verdict("scheduler-requeued-repeatedly", "attention", ident, labels, n >= cfg.requeue_attention, 0.0,
                    *TEXT["scheduler-requeued-repeatedly"],
                    {"values": {"requeues": float(n)}, "count": n}),
        ]
        return judge_all(track.alerts, verdicts, t)

    def _judge_class(self, st: ClusterState, key: str, f: ClusterFigures, t: float) -> list[AlertTransition]:
        cfg, c = self.cfg, st.classes[key]
        queue, _, gpus = key.rpartition("/")
        ident = {"cluster": st.cluster, "queue": queue, "gpus": gpus}
        labels = _mark(st, dict(ident))
        waits = sorted(t - j.wait_from for j in st.jobs.values()
                       if j.state == JobState.PENDING and class_key(j.queue, j.gpus) == key)
        wait_values: dict[str, float] = {}
        over = False
        if len(c.waits) >= cfg.wait_baseline_min:  # none pending: a wait of 0 (a resolve's figure)
            med, mad, _ = median_mad(c.waits)
            limit = max(med + cfg.wait_mads * mad, cfg.wait_min)
            now_wait = median(waits) if waits else 0.0
            over = bool(waits) and now_wait > limit
            wait_values = {"wait_s": now_wait, "baseline_s": med, "limit_s": limit, "pending": float(len(waits))}
        rate_values: dict[str, float] = {}
        drop = False
        outcomes = list(c.outcomes)
        recent, before = outcomes[-cfg.success_window:], outcomes[:-cfg.success_window]
        if len(recent) == cfg.success_window and len(before) >= cfg.success_min_jobs:
            r_now, r_base = sum(recent) / len(recent), sum(before) / len(before)
            drop = r_now < r_base - cfg.success_drop
            rate_values = {"rate": r_now, "baseline_rate": r_base, "jobs": float(len(recent))}
        verdicts = [
            Verdict("scheduler-wait-above-baseline", "attention", ident, labels, over,
                    cfg.wait_periods * cfg.period, *TEXT["scheduler-wait-above-baseline"], {"values": wait_values},
                    RESOLVED["scheduler-wait-above-baseline"]),
            Verdict("scheduler-success-rate-drop", "attention", ident, labels, drop, 0.0,
                    *TEXT["scheduler-success-rate-drop"], {"values": rate_values},
                    RESOLVED["scheduler-success-rate-drop"]),
        ]
        return judge_all(c.alerts, verdicts, t)


def class_key(queue: str, gpus: int) -> str:
    """A class of jobs for the baselines: partition (or queue) and GPUs requested."""
    return f"{queue}/{gpus}"


def fragmented(job: SchedulerJob, nodes: dict[str, NodeCapacity]) -> str:
    """Why a pending job needing N GPUs on one node waits on fragmentation ("gn1: 2 free, gn2: 2
    free"), or "" when it does not: it waits for resources (a job behind it in priority is not
    told), at least N are free over its partition's usable nodes, no one node has N free, and one
    of them could hold N."""
    n = job.gpus
    if n <= 0 or job.state != JobState.PENDING or job.reason not in RESOURCE_REASONS:
        return ""
    part = _partition(job.queue, nodes)
    free = free_gpus(job.queue, nodes)
    if sum(free.values()) < n or max(free.values(), default=0) >= n or max((c.gpus_total for c in part),
                                                                         default=0) < n:
        return ""
    return ", ".join(f"{node}: {k} free" for node, k in sorted(free.items()) if k)


def _mark(st: ClusterState, labels: dict[str, str]) -> dict[str, str]:
    """An alert's labels, marked when the cluster's records come from the simulator."""
    return simulated_labels(labels) if st.simulated else labels


def usable(node: NodeCapacity) -> bool:
    """Whether a job can get the node's free GPUs (not down, drained, ...)."""
    return not node.state.lower().startswith(UNUSABLE)


def _partition(queue: str, nodes: dict[str, NodeCapacity]) -> list[NodeCapacity]:
    return [c for c in nodes.values() if not queue or not c.partitions or queue in c.partitions]


def free_gpus(queue: str, nodes: dict[str, NodeCapacity]) -> dict[str, int]:
    """Free GPUs per node of the partition (or queue) ``queue``."""
    return {c.node: max(0, c.gpus_total - c.gpus_allocated) for c in _partition(queue, nodes)}


def _free(note: str) -> float:
    return float(sum(int(p.split(": ")[1].split()[0]) for p in note.split(", ") if ": " in p)) if note else 0.0


def _quantile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)
