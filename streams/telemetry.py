"""The stream worker's Prometheus metrics: what it read, how far behind it is, what it set aside.

The runtime (:mod:`gpuwarden.streams.runtime`) calls these hooks on its event loop; the HTTP
thread of :mod:`gpuwarden.exposition` only reads the registry. Counts the runners keep
themselves (dead letters) are carried over as counter increments at each
:meth:`StreamMetrics.refresh`, so the runners stay free of prometheus-client.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwarden.humantime import span
from gpuwarden.streams.stageseries import StageSeries

#: Seconds between two refreshes of the lag gauges and carried-over counts.
REFRESH_S = 1.0
#: Seconds between two readings of the task classes' baselines (they change every
#: ``engine.baseline_refresh`` of event time; a reading walks every class).
CLASSES_S = 15.0
#: Seconds an input topic may be behind (lag > 0) with no record of it applied before the worker
#: is not ready (``/-/ready``).
STALLED_S = 60.0
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Runner(Protocol):
    """What :meth:`StreamMetrics.refresh` reads of a :class:`gpuwarden.streams.keyed.KeyedRunner`."""

    dead_by: Mapping[tuple[str, str], int]

    def keys(self) -> list[str]: ...


class StreamMetrics:
    """One worker's series, on its own registry (served by ``gpuwarden streams --metrics-port``)."""

    def __init__(self, registry: CollectorRegistry | None = None, refresh_s: float = REFRESH_S,
                 classes_s: float = CLASSES_S, clock: Any = time.monotonic) -> None:
        self.registry = registry or CollectorRegistry()
        self.refresh_s, self.classes_s, self.clock = refresh_s, classes_s, clock
        # Readiness: per input topic of this worker's tasks, its lag (as the last refresh saw it)
        # and when it last moved (records applied, caught up, or first seen behind).
        self._behind: dict[str, int] = {}
        self._moved: dict[str, float] = {}
        r = self.registry
        self.records = Counter("gpuwarden_streams_records", "records read, by input topic", ("topic",), registry=r)
        self.lag = Gauge("gpuwarden_streams_consumer_lag", "records on the broker past what this worker applied "
                         "(last stable offset minus next offset), per input partition of its tasks",
                         ("topic", "partition"), registry=r)
        self.dead_letters = Counter("gpuwarden_streams_dead_letters", "records sent to a dead-letter topic, "
                                    "by input topic and reason", ("topic", "reason"), registry=r)
        self.deleted_unread = Counter("gpuwarden_streams_deleted_unread", "input records the broker deleted "
                                      "(retention, delete-records) before this worker read them",
                                      ("topic", "partition"), registry=r)
        self.unsent = Counter("gpuwarden_streams_unsent", "records too large for their topic (kept in the "
                              "worker's unsent.jsonl)", registry=r)
        self.transitions = Counter("gpuwarden_streams_transitions", "alert transitions produced, by rule, tier "
                                   "and state", ("rule", "tier", "state"), registry=r)
        self.transactions = Counter("gpuwarden_streams_transactions", "task transactions: committed, or aborted "
                                    "(the task then restores from what was committed)", ("outcome",), registry=r)
        self.last_commit = Gauge("gpuwarden_streams_last_commit_timestamp_seconds", "wall time of the last "
                                 "committed transaction", registry=r)
        self.tasks = Gauge("gpuwarden_streams_tasks", "tasks this worker runs, by stage group", ("group",), registry=r)
        self.state_keys = Gauge("gpuwarden_streams_state_keys", "keys in a state table (nodes, task classes)",
                                ("table",), registry=r)
        self.restoring = Gauge("gpuwarden_streams_restoring_tasks", "tasks being restored now", registry=r)
        self.restore_seconds = Histogram("gpuwarden_streams_restore_seconds", "wall time to restore a task "
                                         "(changelog, batch log, replay)", buckets=_SECONDS, registry=r)
        self.restore_records = Counter("gpuwarden_streams_restore_records", "input records applied again by "
                                       "restores", registry=r)
        self.diverged = Counter("gpuwarden_streams_replay_diverged", "replayed batches whose outputs differed from "
                                "the logged run's (a defect)", registry=r)
        self.classes = _ClassSeries()
        r.register(self.classes)
        self.stages = StageSeries()
        r.register(self.stages)
        self._classes_next = float("-inf")
        self._seen: dict[Any, int] = {}  # carried-over counts as last read
        self._lagging: set[tuple[str, str]] = set()
        self._next = float("-inf")

    def fetched(self, records: Mapping[str, list[Any]]) -> None:
        """One batch: its records per input topic."""
        now = self.clock()
        for topic, recs in records.items():
            self.records.labels(topic).inc(len(recs))
            if recs:
                self._moved[topic] = now

    def ready(self) -> str | None:
        """``/-/ready``: None while every input topic this worker holds is caught up or moving;
        else the topics behind (lag > 0) with nothing applied for over :data:`STALLED_S`. Read
        from the HTTP thread: a worker whose loop stopped goes unready too, as its last lags age."""
        now = self.clock()
        stuck = [f"{t} (lag {n}, nothing applied for {span(now - self._moved.get(t, now))})"
                 for t, n in sorted(self._behind.items()) if n > 0 and now - self._moved.get(t, now) > STALLED_S]
        return "inputs not progressing: " + ", ".join(stuck) if stuck else None

    def produced(self, transitions: Iterable[Mapping[str, Any]]) -> None:
        for t in transitions:
            self.transitions.labels(t["rule"], str(t["tier"]), str(t["state"])).inc()

    def committed(self) -> None:
        self.transactions.labels("committed").inc()
        self.last_commit.set(time.time())

    def restored(self, seconds: float, records: int, diverged: int) -> None:
        self.restore_seconds.observe(seconds)
        self.restore_records.inc(records)
        self.diverged.inc(diverged)

    def refresh(self, lags: Mapping[Any, int], runners: Iterable[Runner], unsent: Any,
                tasks: Iterable[Any] = ()) -> None:
        """At most every ``refresh_s``: lag per input partition (``lags``: TopicPartition → records),
        the runners' counts carried over and their keys; every ``classes_s``, the tasks' task
        classes against their baselines and the node, scheduler and service stages' figures
        (:mod:`gpuwarden.streams.stageseries`)."""
        now = time.monotonic()
        tasks = list(tasks)
        if tasks and now >= self._classes_next:
            self._classes_next = now + self.classes_s
            by = _stages(tasks)
            self.classes.read(by["class"])
            self.stages.read(by["node"], by["cluster"], by["service"])
        self._progress(lags)
        if now < self._next:
            return
        self._next = now + self.refresh_s
        lagging = set()
        for tp, n in lags.items():
            labels = (tp.topic, str(tp.partition))
            self.lag.labels(*labels).set(n)
            lagging.add(labels)
        for labels in self._lagging - lagging:  # no longer this worker's to report
            self.lag.remove(*labels)
        self._lagging = lagging
        keys: dict[str, int] = {}
        for runner in runners:
            for (topic, reason), n in runner.dead_by.items():
                self._carry(self.dead_letters.labels(topic, reason), ("dead", topic, reason), n)
        for t in tasks:
            for table, runner in t.tables.items():
                keys[table] = keys.get(table, 0) + len(runner.keys())
        for table, n in keys.items():
            self.state_keys.labels(table).set(n)
        groups: dict[str, int] = {}
        for t in tasks:
            groups[t.id.group] = groups.get(t.id.group, 0) + 1
        for g in ("node", "class", "service", "cluster"):
            self.tasks.labels(g).set(groups.get(g, 0))
        self._carry(self.unsent, "unsent", unsent.count)

    def _progress(self, lags: Mapping[Any, int]) -> None:
        """Each input topic's lag; one caught up counts as moving, one newly behind starts its clock."""
        now = self.clock()
        behind: dict[str, int] = {}
        for tp, n in lags.items():
            behind[tp.topic] = behind.get(tp.topic, 0) + max(0, n)
        for topic, n in behind.items():
            if n <= 0 or topic not in self._behind or self._behind[topic] <= 0:
                self._moved[topic] = now
        self._behind = behind  # one assignment: the HTTP thread reads whole dicts

    def _carry(self, counter: Any, key: Any, total: int) -> None:
        counter.inc(max(0, total - self._seen.get(key, 0)))
        self._seen[key] = total


def _stages(tasks: list[Any]) -> dict[str, list[Any]]:
    """Each task kind's stages: what the class and stage series read."""
    by: dict[str, list[Any]] = {"node": [], "class": [], "service": [], "cluster": []}
    for t in tasks:
        by[t.id.group].append(t.node_stage if t.id.group == "node" else t.stage)
    return by


class _ClassSeries(Collector):
    """Each task class's newest summary values and baseline bands, as read last (whole, so a class
    this worker no longer holds disappears at the next reading)."""

    def __init__(self) -> None:
        self._rows: list[tuple[str, str, float | None, Any]] = []  # class, statistic, value, band
        self._counts = (0, 0)  # learning, baselined

    def read(self, stages: Iterable[Any]) -> None:
        """``stages``: :class:`gpuwarden.streams.classstage.ClassStage` s (``classes``, ``latest``, ``baseline``)."""
        rows, learning, n = [], 0, 0
        for stage in stages:
            for c in stage.classes():
                n += 1
                bands, latest = stage.baseline(c), stage.latest(c)
                learning += all(b is None for b in bands.values())
                rows += [(c, k, latest.get(k), b) for k, b in bands.items() if k in latest or b is not None]
        self._rows, self._counts = rows, (learning, n - learning)

    def collect(self) -> Iterator[Metric]:
        rows, (learning, baselined) = self._rows, self._counts
        value = GaugeMetricFamily("gpuwarden_streams_class_value", "a task class's newest task-summary value, "
                                  "by statistic", labels=("task_class", "statistic"))
        band = GaugeMetricFamily("gpuwarden_streams_class_baseline", "a task class's baseline: its median "
                                 "and the band around it (median ± 3 MAD)", labels=("task_class", "statistic", "bound"))
        classes = GaugeMetricFamily("gpuwarden_streams_classes", "task classes this worker holds, learning "
                                    "(no baseline yet) or baselined", labels=("state",))
        for c, k, v, b in rows:
            if v is not None:
                value.add_metric((c, k), v)
            if b is not None:
                for bound, x in (("median", b.median), ("low", b.low), ("high", b.high)):
                    band.add_metric((c, k, bound), x)
        classes.add_metric(("learning",), learning)
        classes.add_metric(("baselined",), baselined)
        yield from (value, band, classes)
