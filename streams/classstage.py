"""Stage 2, keyed by task class: rolling baselines and the rules that need them.

Each TaskSummary (one task on one node, one summary interval) is judged against
its class's baseline first and then folded into it, unless that task already
has a deviation pending or firing (a degraded task must not teach the baseline
that degraded is normal). A class is "learning" until ``observation_period``
of event time has passed since its first summary and it has
``baseline_min_samples`` values: no deviation alerts meanwhile.

Arrival order: a class's summaries come from several nodes, and on Kafka one
node's may trail the others' (catching up after a takeover). A per-class reorder
buffer (``gpuwarden.streams.reorder``, as stage 1's per node) applies them in content
order (ts, node, task id): the head is released
once every live contributor (task on a node) has sent a summary at least as new,
or once it is ``summary_lateness`` behind the class's newest; a contributor that
far behind is no longer live. So what a class applies does not depend on how its
contributors were interleaved, within that bound. A summary older than the last
applied one is applied at once and counted ``late``; one not newer than its
contributor's newest (stage 1 re-emits after a restart) is dropped.

On Kafka the stage also waits for a *gate* (``process(summary, gate)``, ``release``):
the watermark over stage 1's input partitions (:mod:`gpuwarden.streams.progress`), below
which every summary has arrived. A head is released only once both say so, so a node this
class has not heard from yet, or one whose partition is still reading a backlog hours of
event time behind the others, cannot send a summary that sorts ahead of what was applied.
In one process the gate is open (infinite): summaries come in the order stage 1 makes them.
"""

from __future__ import annotations

import math
from collections import deque
from heapq import heappop, heappush
from typing import Any

from gpuwarden.contract import AlertTransition, Baseline, TaskSummary, decode, encode, simulated_labels
from gpuwarden.humantime import span
from gpuwarden.streams import statecodec
from gpuwarden.streams.baseline import band, median_mad
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.evaluate import Context, evaluate, resolve_all
from gpuwarden.streams.columns import CLASS_INDEX
from gpuwarden.streams.metrics import CLASS_ROW, SCOPES
from gpuwarden.streams.reorder import ReorderBuffer
from gpuwarden.streams.rules import DeviationC, RulePack, rule_leaves
from gpuwarden.streams.statecodec import state
from gpuwarden.streams.straggler import StragglerJudge, open_slots
from gpuwarden.streams.windows import BucketWindow

VERSION_HORIZON = 600.0


@state
class JobState:
    __slots__ = ("task_id", "node", "win", "labels", "last_ts", "alerts")

    def __init__(self, task_id: str, node: str, maxlen: int) -> None:
        self.task_id, self.node = task_id, node
        self.win = BucketWindow(maxlen)
        self.labels: dict = {}
        self.last_ts = 0.0
        self.alerts: dict = {}


@state
class ClassState:
    __slots__ = ("task", "first_ts", "max_ts", "values", "cache", "cache_ts", "jobs", "versions",
                 "job_alerts", "buffer", "received", "heap", "newest", "late", "ranks")
    ADDED = {"ranks": dict}  # state written before jobs' nodes were compared (streams/straggler.py)

    def __init__(self, task: str, first_ts: float, keep: int) -> None:
        self.task = task
        self.first_ts = first_ts
        self.max_ts = float("-inf")  # newest applied
        self.values: dict = {k: deque(maxlen=keep) for k in CLASS_ROW}
        self.cache: dict = {}
        self.cache_ts: float | None = None
        self.jobs: dict = {}
        self.versions: dict = {}  # task_id -> {node: [driver, cuda, ts]}
        self.job_alerts: dict = {}  # task_id -> {fp: AlertSlot}
        self.buffer: ReorderBuffer[TaskSummary] = ReorderBuffer()  # (ts, (node, task_id), summary) not applied
        self.received: dict = {}  # (task_id, node) -> newest ts received, while live
        self.heap: list = []  # (ts, task_id, node), lazily pruned: finds the slowest live contributor
        self.newest = first_ts  # newest received
        self.late = 0
        self.ranks: dict = {}  # task_id -> JobRanks: its nodes compared (streams/straggler.py)


class _ClassCtx(Context):
    def __init__(self, stage: ClassStage) -> None:
        super().__init__()
        self.stage = stage
        self.cls: ClassState | None = None
        self.job: JobState | None = None
        self.task_id = ""

    def series(self, metric: str, since: float, use_max: bool = False) -> tuple[list[float], list[float]]:
        if self.job is None:
            return [], []
        return self.job.win.series(CLASS_INDEX[metric], since, use_max)

    def baseline(self, metric: str) -> tuple[float, float, int] | None:
        assert self.cls is not None
        if self.stage.learning(self.cls, self.now):
            return None
        b = self.cls.cache.get(metric)
        return None if b is None else (b[0], b[1], b[2])

    def scalar(self, metric: str) -> float | None:
        assert self.cls is not None
        vers = self.cls.versions.get(self.task_id, {})
        live = {n: v for n, v in vers.items() if self.now - v[2] <= VERSION_HORIZON}
        if metric == "nodes":
            return float(len(live))
        if metric == "version_skew":
            distinct = sorted({(v[0], v[1]) for v in live.values()})
            if len(distinct) > 1:
                self.ev["note"] = "; ".join(
                    f"{n}: driver {v[0] or '?'} CUDA {v[1] or '?'}" for n, v in sorted(live.items()))
            return float(len(distinct) - 1) if distinct else None
        return None


class ClassStage:
    """Stage 2, keyed by task class: rolling baselines (median/MAD) and deviation/composite rules
    that need them; 'learning' during the observation period."""

    def __init__(self, rules: RulePack, config: EngineConfig) -> None:
        self.rules = rules
        self.cfg = config
        self._classes: dict[str, ClassState] = {}
        self._ctx = _ClassCtx(self)
        self._stragglers = StragglerJudge(rules.by_scope["rank"], float(config.job_expiry))
        self._maxlen = int(config.history // config.summary_interval) + 1
        self.lateness = float(config.summary_lateness)
        #: (mads, min_delta) of the first deviation rule on each metric: the band shown is the one judged.
        self._bands: dict[str, tuple[float, float]] = {}
        for rule in rules.by_scope["class"]:
            for leaf in rule_leaves(rule):
                if isinstance(leaf, DeviationC):
                    d = leaf.deviation
                    self._bands.setdefault(d.metric, (d.mads, d.min_delta))

    def classes(self) -> list[str]:
        return sorted(self._classes)

    def dump(self, task_class: str) -> bytes:
        """The class's state; buffered summaries as their wire JSON (the heap is rebuilt on load)."""
        cls = self._classes[task_class]
        buf, heap = cls.buffer, cls.heap
        cls.buffer = [encode(s).decode() for _, _, s in buf]  # type: ignore[assignment]
        cls.heap = []
        try:
            return statecodec.dumps(cls)
        finally:
            cls.buffer, cls.heap = buf, heap

    def load(self, task_class: str, data: bytes) -> None:
        try:
            cls: ClassState = statecodec.loads(data)
        except KeyError as e:
            raise ValueError(f"state of task class {task_class!r} lacks {e} (written before the stage-2 "
                             "reorder buffer): start with fresh state") from None
        cls.buffer = ReorderBuffer(_item(decode(r)) for r in cls.buffer)
        cls.heap = sorted((ts, *who) for who, ts in cls.received.items())
        self._classes[task_class] = cls

    def drop(self, task_class: str) -> None:
        self._classes.pop(task_class, None)

    def learning(self, cls: ClassState, now: float) -> bool:
        return now - cls.first_ts < self.cfg.observation_period or \
            len(cls.values["util_gpu"]) < self.cfg.baseline_min_samples and not cls.cache

    def baseline(self, task_class: str) -> dict[str, Baseline | None]:
        """Each statistic's band, or None while the class is learning (or has no such values)."""
        cls = self._classes.get(task_class)
        out: dict[str, Baseline | None] = {k: None for k in CLASS_ROW}
        if cls is None or self.learning(cls, cls.max_ts):
            return out
        for k, (med, mad, n) in sorted(cls.cache.items()):
            lo, hi = band(med, mad, *self._bands.get(k, (3.0, 0.0)), SCOPES["class"][k].unit)
            out[k] = Baseline(median=med, mad=mad, low=lo, high=hi, samples=n)
        return out

    def latest(self, task_class: str) -> dict[str, float]:
        """Each statistic's newest value that went into the class's baseline ({} for an unknown class)."""
        cls = self._classes.get(task_class)
        return {} if cls is None else {k: v[-1] for k, v in cls.values.items() if v and v[-1] is not None}

    def counters(self) -> dict[str, int]:
        """``late``: summaries applied after a newer one of their class (past ``summary_lateness``)."""
        return {"late": sum(c.late for c in self._classes.values())}

    def open_slots(self) -> list[tuple[str, Any]]:
        out = []
        for c in self.classes():
            cls = self._classes[c]
            for alerts in [*(j.alerts for j in cls.jobs.values()), *cls.job_alerts.values()]:
                out.extend((fp, s) for fp, s in alerts.items() if s.firing_since is not None)
            out.extend(open_slots(cls.ranks))
        return out

    def process(self, summary: TaskSummary, gate: float = math.inf) -> list[AlertTransition]:
        """Take one summary; returns the transitions of the summaries this releases (which may be
        earlier ones of the class, or none while it waits for a slower contributor or for the
        ``gate``: every summary of the class dated up to it has arrived)."""
        if not isinstance(summary, TaskSummary):
            return []
        t = summary.ts
        cls = self._classes.get(summary.task)
        if cls is None:
            cls = self._classes[summary.task] = ClassState(summary.task, t, self.cfg.baseline_samples)
        who = (summary.task_id, summary.node)
        if t <= cls.received.get(who, float("-inf")):
            return []  # a summary stage 1 produced again after a restart (they come in ts order)
        cls.received[who] = t
        heappush(cls.heap, (t, *who))
        if t > cls.newest:
            cls.newest = t
        if t < cls.max_ts:
            cls.late += 1
            return self._apply(cls, summary) + self._release(cls, gate)
        cls.buffer.add(*_item(summary))
        return self._release(cls, gate)

    def release(self, task_class: str, gate: float) -> list[AlertTransition]:
        """The gate moved on: apply what it and the class's contributors now allow."""
        cls = self._classes.get(task_class)
        return [] if cls is None else self._release(cls, gate)

    def _release(self, cls: ClassState, gate: float) -> list[AlertTransition]:
        floor = min(self._slowest(cls), gate)  # every live contributor is within the lateness
        out: list[AlertTransition] = []
        for _, _, summary in cls.buffer.release(floor):
            out += self._apply(cls, summary)
        return out

    def flush(self) -> list[AlertTransition]:
        """Apply every buffered summary (end of a finite input), classes in name order."""
        out: list[AlertTransition] = []
        for c in self.classes():
            for _, _, summary in self._classes[c].buffer.drain():
                out += self._apply(self._classes[c], summary)
        return out

    def _slowest(self, cls: ClassState) -> float:
        """Newest ts of the class's slowest live contributor (inf: none); forgets the others.
        Live: less than ``summary_lateness`` behind the class's newest."""
        heap, received = cls.heap, cls.received
        dead = cls.newest - self.lateness
        while heap:
            ts, tid, node = heap[0]
            got = received.get((tid, node))
            if got == ts and ts > dead:
                return ts
            heappop(heap)
            if got == ts:
                del received[(tid, node)]  # not live: it no longer holds the class back
        return float("inf")

    def _apply(self, cls: ClassState, summary: TaskSummary) -> list[AlertTransition]:
        t = summary.ts
        if cls.max_ts == float("-inf"):
            cls.first_ts = t
        if t > cls.max_ts:
            cls.max_ts = t
        key = f"{summary.task_id}@{summary.node}"
        job = cls.jobs.get(key)
        if job is None:
            job = cls.jobs[key] = JobState(summary.task_id, summary.node, self._maxlen)
        elif t <= job.last_ts:
            return []  # a copy of one applied after its contributor was forgotten
        job.last_ts = max(job.last_ts, t)
        job.labels = {"node": summary.node, "task": summary.task_id, "task_class": summary.task,
                      **{k: v for k, v in summary.labels.items() if k in ("user", "project")}}
        if summary.simulated:
            job.labels = simulated_labels(job.labels)
        job.win.rows.append(tuple(summary.stats.get(k) for k in CLASS_ROW))
        job.win.close(t)
        cls.versions.setdefault(summary.task_id, {})[summary.node] = [
            summary.labels.get("driver_version", ""), summary.labels.get("cuda_version", ""), t]
        self._refresh(cls, t)
        ctx = self._ctx
        ctx.cls, ctx.job, ctx.task_id = cls, job, summary.task_id
        out = evaluate(self.rules.by_scope["class"], ctx, t, {"node": job.node, "task": job.task_id},
                       job.labels, job.alerts)
        ctx.job = None
        job_labels = {k: v for k, v in job.labels.items() if k != "node"}
        out += evaluate(self.rules.by_scope["job"], ctx, t, {"task": job.task_id}, job_labels,
                        cls.job_alerts.setdefault(summary.task_id, {}))
        out += self._stragglers.take(cls.ranks, summary)
        if not job.alerts:
            for k, v in summary.stats.items():
                if k in cls.values:
                    cls.values[k].append(v)
        out += self._expire(cls, t)
        return out

    def _refresh(self, cls: ClassState, t: float) -> None:
        if cls.cache_ts is not None and t - cls.cache_ts < self.cfg.baseline_refresh:
            return
        cls.cache_ts = t
        cls.cache = {k: list(median_mad(v)) for k, v in cls.values.items()
                     if len(v) >= self.cfg.baseline_min_samples}

    def _expire(self, cls: ClassState, t: float) -> list[AlertTransition]:
        out: list[AlertTransition] = []
        for key in sorted(cls.jobs):
            job = cls.jobs[key]
            if t - job.last_ts >= self.cfg.job_expiry:
                out += resolve_all(job.alerts, t, f"resolved: the job sent no summary for {span(t - job.last_ts)}")
                del cls.jobs[key]
        live = {j.task_id for j in cls.jobs.values()}
        for tid in sorted(cls.versions):
            if tid not in live:
                out += resolve_all(cls.job_alerts.pop(tid, {}), t)
                del cls.versions[tid]
        return out + self._stragglers.expire(cls.ranks, live, t)


def _item(summary: TaskSummary) -> tuple[float, tuple[str, str], TaskSummary]:
    """A buffer item: ts, the rest of the content key (node, task id), the summary."""
    return summary.ts, (summary.node, summary.task_id), summary
