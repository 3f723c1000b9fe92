"""Prometheus ``/metrics`` for the scheduler collector: the queue and the GPUs as each poll saw them.

The collector is the one process that sees the whole queue of a cluster at every poll, so the
queue's series are its own: jobs by partition and state, the waits of pending jobs, the waits of
jobs seen started (a histogram, for quantiles over any range), GPUs total, allocated and free
per partition and per node, requeues and preemptions, and how the polls themselves went. What
needs the GPUs' own readings ("allocated but idle") or the stage's judgement (fragmentation) is
the stream worker's (``gpuwarden_streams_scheduler_*``, :mod:`gpuwarden.streams.telemetry`).
Gauges are rebuilt whole at each answered poll, so a partition or node gone from the scheduler
disappears; a poll the scheduler did not answer leaves them as they were (away is not empty).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob, SchedulerPoll

#: The label of a job without a partition (queue) and of GPUs on a node in none (Kubernetes).
NO_PARTITION = "none"
#: Queue waits, seconds: a minute to two weeks.
WAIT_BUCKETS = (60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 86400, 2 * 86400, 7 * 86400, 14 * 86400)
POLL_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def partition(name: str) -> str:
    return name or NO_PARTITION


class SchedulerMetrics:
    """One collector's registry (served by ``gpuwarden scheduler --metrics-port``); :meth:`polled`
    takes each poll's records as the collector publishes them."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
        self.polls = Counter("gpuwarden_scheduler_polls", "polls of the scheduler, by outcome (ok, error: "
                             "it did not answer)", ("cluster", "outcome"), registry=r)
        self.poll_seconds = Histogram("gpuwarden_scheduler_poll_duration_seconds", "wall time of one poll "
                                      "(squeue and sinfo, or the API lists)", ("cluster",), buckets=POLL_BUCKETS,
                                      registry=r)
        self.answering = Gauge("gpuwarden_scheduler_answering", "1 when the last poll was answered, 0 when the "
                               "scheduler did not answer", ("cluster",), registry=r)
        self.last_poll = Gauge("gpuwarden_scheduler_last_poll_timestamp_seconds", "wall time of the last "
                               "answered poll", ("cluster",), registry=r)
        self.waited = Histogram("gpuwarden_scheduler_queue_wait_seconds", "queue wait of jobs seen started "
                                "(start less eligible, else submit, time), counted once per job when the "
                                "collector first sees it started", ("cluster", "partition"),
                                buckets=WAIT_BUCKETS, registry=r)
        self.requeues = Counter("gpuwarden_scheduler_requeues", "requeues (Slurm) or container restarts "
                                "(Kubernetes) seen between polls", ("cluster", "partition"), registry=r)
        self.preemptions = Counter("gpuwarden_scheduler_preemptions", "jobs seen going to the preempted "
                                   "state", ("cluster", "partition"), registry=r)
        self.queue = _QueueSeries()
        r.register(self.queue)
        self._jobs: dict[str, tuple[JobState, int, bool]] = {}  # job id -> state, restarts, seen started

    def polled(self, records: Iterable[Any], seconds: float) -> None:
        """One poll's records (its :class:`SchedulerPoll` last) and the wall time it took."""
        records = list(records)
        end = records[-1]
        assert isinstance(end, SchedulerPoll)
        c = end.cluster
        self.poll_seconds.labels(c).observe(seconds)
        self.polls.labels(c, "error" if end.error else "ok").inc()
        self.polls.labels(c, "ok" if end.error else "error").inc(0)  # both outcomes exist from the first poll
        self.answering.labels(c).set(0 if end.error else 1)
        if end.error:
            return
        self.last_poll.labels(c).set(end.ts)
        jobs = [r for r in records if isinstance(r, SchedulerJob)]
        self.queue.read(c, jobs, [r for r in records if isinstance(r, NodeCapacity)])
        seen: dict[str, tuple[JobState, int, bool]] = {}
        for j in jobs:
            p = partition(j.queue)
            before = self._jobs.get(j.job_id)
            requeued = self.requeues.labels(c, p)
            preempted = self.preemptions.labels(c, p)
            started = before is not None and before[2]
            if not started and j.start_time is not None and j.state is not JobState.PENDING:
                self.waited.labels(c, p).observe(max(0.0, j.start_time - (j.eligible_time or j.submit_time
                                                                          or j.start_time)))
                started = True
            if before is not None:
                requeued.inc(max(0, j.restarts - before[1]))
                preempted.inc(int(j.state is JobState.PREEMPTED and before[0] is not JobState.PREEMPTED))
            seen[j.job_id] = (j.state, j.restarts, started and j.state is not JobState.PENDING)
        self._jobs = seen


class _QueueSeries(Collector):
    """The queue and the GPUs at the last answered poll of each cluster, as gauges."""

    def __init__(self) -> None:
        self._jobs: dict[str, dict[tuple[str, str], int]] = {}  # cluster -> (partition, state) -> jobs
        self._waits: dict[str, dict[tuple[str, str], float]] = {}  # cluster -> (partition, stat) -> s
        self._gpus: dict[str, dict[tuple[str, str], int]] = {}  # cluster -> (partition, state) -> GPUs
        self._nodes: dict[str, dict[tuple[str, str], int]] = {}  # cluster -> (node, state) -> GPUs

    def read(self, cluster: str, jobs: list[SchedulerJob], nodes: list[NodeCapacity]) -> None:
        counts: dict[tuple[str, str], int] = {}
        waits: dict[str, list[float]] = {}
        for j in jobs:
            p = partition(j.queue)
            counts[p, j.state.value] = counts.get((p, j.state.value), 0) + 1
            if j.state is JobState.PENDING:
                waits.setdefault(p, []).append(max(0.0, j.ts - (j.eligible_time or j.submit_time or j.ts)))
        for p in {p for p, _ in counts}:  # every partition with jobs says how many wait and run, 0 or not
            for s in (JobState.PENDING.value, JobState.RUNNING.value):
                counts.setdefault((p, s), 0)
        stats = {}
        for p, ws in waits.items():
            ws.sort()
            stats.update({(p, "p50"): _rank(ws, 0.5), (p, "p90"): _rank(ws, 0.9), (p, "max"): ws[-1]})
        gpus: dict[tuple[str, str], int] = {}
        per_node: dict[tuple[str, str], int] = {}
        for n in nodes:
            used = min(n.gpus_allocated, n.gpus_total)
            figures = {"total": n.gpus_total, "allocated": used, "free": n.gpus_total - used}
            for state, v in figures.items():
                per_node[n.node, state] = v
                for p in n.partitions or [NO_PARTITION]:
                    gpus[p, state] = gpus.get((p, state), 0) + v
        self._jobs[cluster], self._waits[cluster] = counts, stats
        self._gpus[cluster], self._nodes[cluster] = gpus, per_node

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("gpuwarden_scheduler_jobs", "jobs in the scheduler's view at the last poll, "
                                 "by partition and state", labels=("cluster", "partition", "state"))
        waits = GaugeMetricFamily("gpuwarden_scheduler_pending_wait_seconds", "how long the pending jobs "
                                  "have waited so far (since eligible, else submitted): median, 90th "
                                  "percentile and longest", labels=("cluster", "partition", "stat"))
        gpus = GaugeMetricFamily("gpuwarden_scheduler_gpus", "GPUs of a partition's nodes (a node in several "
                                 "partitions counts in each): total, allocated, free", labels=("cluster", "partition", "state"))
        nodes = GaugeMetricFamily("gpuwarden_scheduler_node_gpus", "one node's GPUs as the scheduler counts "
                                  "them: total, allocated, free", labels=("cluster", "node", "state"))
        for family, table in ((jobs, self._jobs), (waits, self._waits), (gpus, self._gpus), (nodes, self._nodes)):
            for cluster in sorted(table):
                for (a, b), v in sorted(table[cluster].items()):
                    family.add_metric((cluster, a, b), v)
            yield family


def _rank(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile of sorted values."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]
