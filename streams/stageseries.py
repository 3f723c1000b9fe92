"""The stream worker's series read from its stages: what only the stages know of queues and SLOs.

The scheduler collector exposes the queue itself (``gpuwarden_scheduler_*``); the worker adds
what needs its joins and judgements: how many of the GPUs jobs hold are busy or idle (stage 1's
allocated-versus-used join, the ``job-gpus-unused`` rule's figures), the pending jobs the
scheduler stage finds blocked by fragmentation, and each service's SLO budget left and burn
rates (the service stage's windows, as the ``slo-*-burn`` rules see them). Read every
``CLASSES_S`` of wall time, whole, like the task classes' series.

The SLO series are per service and objective over all the service's nodes: the service stage
(key service) judges it, so one worker holds each service.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

#: A job without a partition (queue), as the collector's series label it.
NO_PARTITION = "none"
USES = ("busy", "idle", "unread")


def window_label(seconds: float) -> str:
    """Prometheus' duration words: ``5m``, ``1h``, ``3d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


class StageSeries(Collector):
    """The scheduler and SLO figures of the stages, as read last."""

    def __init__(self) -> None:
        self._allocated: dict[tuple[str, str, str], int] = {}  # cluster, partition, use -> GPUs
        self._fragmented: dict[str, int] = {}  # cluster -> pending jobs
        self._budget: dict[tuple[str, str], float] = {}  # service, SLI -> budget left
        self._burn: dict[tuple[str, str, str], float] = {}  # service, SLI, window -> burn rate

    def read(self, node_stages: Iterable[Any], sched_stages: Iterable[Any], service_stages: Iterable[Any]) -> None:
        """Each ``node_stage.allocations()``, ``sched_stage.clusters()``/``figures(c)``,
        ``service_stage.slo_status()`` (one per task of each kind)."""
        allocated: dict[tuple[str, str, str], int] = {}
        for node_stage in node_stages:
            for _, a in node_stage.allocations():
                held = len(a.gpus) or a.count
                key = (a.labels.get("cluster", ""), a.labels.get("queue") or NO_PARTITION)
                for use, n in zip(USES, (len(a.busy), len(a.idle), max(0, held - len(a.busy) - len(a.idle)))):
                    allocated[(*key, use)] = allocated.get((*key, use), 0) + n
        fragmented = {}
        for sched_stage in sched_stages:
            for c in sched_stage.clusters():
                f = sched_stage.figures(c)
                if f is not None:
                    fragmented[c] = len(f.fragmented)
        budget: dict[tuple[str, str], float] = {}
        burn: dict[tuple[str, str, str], float] = {}
        for service_stage in service_stages:
            for s in service_stage.slo_status():
                budget[s.service, s.sli] = s.budget_remaining
                for w, rate in s.burn.items():
                    burn[s.service, s.sli, window_label(w)] = rate
        self._allocated, self._fragmented, self._budget, self._burn = allocated, fragmented, budget, burn

    def collect(self) -> Iterator[Metric]:
        allocated = GaugeMetricFamily("gpuwarden_streams_scheduler_allocated_gpus", "GPUs that jobs hold on "
                                      "this worker's nodes, by use at the last evaluation: busy, idle (the "
                                      "allocated-but-unused join), unread (no reading yet)",
                                      labels=("cluster", "partition", "use"))
        for key, n in sorted(self._allocated.items()):
            allocated.add_metric(key, n)
        fragmented = GaugeMetricFamily("gpuwarden_streams_scheduler_fragmented_jobs", "pending jobs waiting on "
                                       "fragmentation at the last poll (enough GPUs free, none of the nodes "
                                       "with as many)", labels=("cluster",))
        for c, n in sorted(self._fragmented.items()):
            fragmented.add_metric((c,), n)
        budget = GaugeMetricFamily("gpuwarden_streams_slo_budget_remaining_ratio", "what is left of a "
                                   "service's error budget over its SLO window (1 untouched, 0 spent, below "
                                   "0 overspent), by objective", labels=("service", "sli"))
        for key, v in sorted(self._budget.items()):
            budget.add_metric(key, v)
        burn = GaugeMetricFamily("gpuwarden_streams_slo_burn_rate", "bad fraction over budget in a window "
                                 "(1: spending exactly the budget), by objective and window",
                                 labels=("service", "sli", "window"))
        for key, v in sorted(self._burn.items()):
            burn.add_metric(key, v)
        yield from (allocated, fragmented, budget, burn)
