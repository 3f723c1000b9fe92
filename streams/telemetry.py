"""The stream worker's Prometheus metrics: what it read, how far behind it is, what it set aside.

The topology (:mod:`gpuwarden.streams.topology`) calls these hooks on its event loop; the
HTTP thread of :mod:`gpuwarden.exposition` only reads the registry. Counts the runners keep
themselves (dead letters, letters the broker refused) are carried over as counter increments
at each :meth:`StreamMetrics.refresh`, so the runners stay free of prometheus-client.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwarden.streams.stageseries import StageSeries

#: Seconds between two refreshes of the lag gauges and carried-over counts (a fetch comes
#: back every ~250 ms; a scrape every 15 s or so).
REFRESH_S = 1.0
#: Seconds between two readings of the task classes' baselines (they change every
#: ``engine.baseline_refresh`` of event time; a reading walks every class).
CLASSES_S = 15.0


class Runner(Protocol):
    """What :meth:`StreamMetrics.refresh` reads of a :class:`gpuwarden.streams.keyed.KeyedRunner`."""

    sources: Mapping[str, Any]
    position: Mapping[str, int]
    dead_by: Mapping[tuple[str, str], int]


class StreamMetrics:
    """One worker's series, on its own registry (served by ``gpuwarden streams --metrics-port``)."""

    def __init__(self, registry: CollectorRegistry | None = None, refresh_s: float = REFRESH_S,
                 classes_s: float = CLASSES_S) -> None:
        self.registry = registry or CollectorRegistry()
        self.refresh_s, self.classes_s = refresh_s, classes_s
        r = self.registry
        self.records = Counter("gpuwarden_streams_records", "records read, by input topic", ("topic",), registry=r)
        self.lag = Gauge("gpuwarden_streams_consumer_lag", "records on the broker past what this worker applied "
                         "(high-water mark minus next offset), per assigned input partition",
                         ("topic", "partition"), registry=r)
        self.dead_letters = Counter("gpuwarden_streams_dead_letters", "records sent to a dead-letter topic, "
                                    "by input topic and reason", ("topic", "reason"), registry=r)
        self.unsent = Counter("gpuwarden_streams_unsent", "records the broker refused for good (kept in the "
                              "worker's unsent.jsonl)", registry=r)
        self.transitions = Counter("gpuwarden_streams_transitions", "alert transitions produced, by rule, tier "
                                   "and state", ("rule", "tier", "state"), registry=r)
        self.state_keys = Gauge("gpuwarden_streams_state_keys", "keys in a state table (nodes, task classes)",
                                ("table",), registry=r)
        self.state_bytes = Gauge("gpuwarden_streams_state_bytes", "bytes of the stored state envelopes",
                                 ("table",), registry=r)
        self.checkpoint = Histogram("gpuwarden_streams_checkpoint_seconds", "wall time to write a checkpoint's "
                                    "envelopes to the changelog and have them acknowledged", ("table",),
                                    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r)
        self.last_checkpoint = Gauge("gpuwarden_streams_last_checkpoint_timestamp_seconds",
                                     "wall time of the last checkpoint", ("table",), registry=r)
        self.classes = _ClassSeries()
        r.register(self.classes)
        self.stages = StageSeries()
        r.register(self.stages)
        self._classes_next = float("-inf")
        self._seen: dict[Any, int] = {}  # carried-over counts as last read
        self._lagging: set[tuple[str, str]] = set()
        self._next = float("-inf")

    def fetched(self, fetched: Mapping[Any, list[Any]]) -> None:
        """One fetch: its records per topic (keys are faust ``TP``s)."""
        for tp, recs in fetched.items():
            self.records.labels(tp.topic).inc(len(recs))

    def produced(self, transitions: Iterable[Any]) -> None:
        for t in transitions:
            self.transitions.labels(t.rule, str(t.tier), str(t.state)).inc()

    def checkpointed(self, table: str, sizes: Mapping[Any, int], seconds: float) -> None:
        """A checkpoint of ``table`` took ``seconds``; ``sizes``: each key's last stored envelope, in bytes."""
        self.checkpoint.labels(table).observe(seconds)
        self.last_checkpoint.labels(table).set(time.time())
        self.state_keys.labels(table).set(len(sizes))
        self.state_bytes.labels(table).set(sum(sizes.values()))

    def refresh(self, consumer: Any, runners: Iterable[Runner], unsent: Any, class_stage: Any = None,
                stages: tuple[Any, Any, Any] | None = None) -> None:
        """At most every ``refresh_s``: lag per assigned input partition (faust's
        ``Consumer.highwater(tp)``, the high-water mark of the last fetch response against the runner's next offset), and the runners' counts carried over;
        every ``classes_s``, the task classes of ``class_stage`` against their baselines and the
        node, scheduler and service ``stages``' figures (:mod:`gpuwarden.streams.stageseries`)."""
        now = time.monotonic()
        if class_stage is not None and now >= self._classes_next:
            self._classes_next = now + self.classes_s
            self.classes.read(class_stage)
            if stages is not None:
                self.stages.read(*stages)
        if now < self._next:
            return
        self._next = now + self.refresh_s
        lagging = set()
        assigned = consumer.assignment()
        for runner in runners:
            for tp in assigned:
                pos = runner.position.get(f"{tp.topic}:{tp.partition}")
                high = consumer.highwater(tp) if tp.topic in runner.sources else None
                if pos is not None and high is not None:
                    labels = (tp.topic, str(tp.partition))
                    self.lag.labels(*labels).set(max(0, high - pos))
                    lagging.add(labels)
            for (topic, reason), n in runner.dead_by.items():
                self._carry(self.dead_letters.labels(topic, reason), ("dead", topic, reason), n)
        self._carry(self.unsent, "unsent", unsent.count)
        for labels in self._lagging - lagging:  # revoked: no longer this worker's to report
            self.lag.remove(*labels)
        self._lagging = lagging

    def _carry(self, counter: Any, key: Any, total: int) -> None:
        counter.inc(max(0, total - self._seen.get(key, 0)))
        self._seen[key] = total


class _ClassSeries(Collector):
    """Each task class's newest summary values and baseline bands, as read last (whole, so a class
    this worker no longer holds disappears at the next reading)."""

    def __init__(self) -> None:
        self._rows: list[tuple[str, str, float | None, Any]] = []  # class, statistic, value, band
        self._counts = (0, 0)  # learning, baselined

    def read(self, stage: Any) -> None:
        """``stage``: a :class:`gpuwarden.streams.classstage.ClassStage` (``classes``, ``latest``, ``baseline``)."""
        rows, learning, names = [], 0, stage.classes()
        for c in names:
            bands, latest = stage.baseline(c), stage.latest(c)
            learning += all(b is None for b in bands.values())
            rows += [(c, k, latest.get(k), b) for k, b in bands.items() if k in latest or b is not None]
        self._rows, self._counts = rows, (learning, len(names) - learning)

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
