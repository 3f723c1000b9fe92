"""The serving engines the agent scrapes, on its own ``/metrics``: one set of names for all four.

The agent already scrapes vLLM, SGLang, TGI and Triton (:mod:`gpuwarden.producers.inference`)
and publishes per-interval deltas; here those deltas add up again into cumulative series,
named once for every engine and labelled with the node, the service (the config's name for
the target) and the model, so one dashboard reads every engine and Prometheus' ``rate`` and
``histogram_quantile`` work as on the engine's own series. Latencies are in seconds whatever
the engine's unit (Triton's milliseconds are converted by the scraper). The GPUs and the
process that serve a service are on an info series, not on every series: they change when the
agent re-attributes, and a counter whose labels change restarts.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwarden.contract import InferenceMetrics

LABELS = ("node", "service", "model", "engine")
#: Our histogram name (the record's) -> series name and help.
HISTOGRAMS = {
    "ttft": ("gpuwarden_inference_time_to_first_token_seconds", "time to the first token of a request"),
    "itl": ("gpuwarden_inference_inter_token_latency_seconds", "time between two generated tokens"),
    "e2e": ("gpuwarden_inference_e2e_request_latency_seconds", "a request from arrival to its last token"),
    "queue": ("gpuwarden_inference_request_queue_time_seconds", "a request's wait before it was scheduled"),
}
COUNTERS = {
    "prompt_tokens": ("gpuwarden_inference_prompt_tokens", "prompt (prefill) tokens processed"),
    "generation_tokens": ("gpuwarden_inference_generation_tokens", "tokens generated"),
    "preemptions": ("gpuwarden_inference_preemptions", "requests preempted (KV cache full)"),
}
#: Finished requests by outcome: ``requests`` (ok) and ``requests_failed`` (the engine's error outcomes).
OUTCOMES = {"requests": "ok", "requests_failed": "failed"}
GAUGES = {
    "requests_running": ("gpuwarden_inference_requests_running", "requests in the running batch"),
    "requests_waiting": ("gpuwarden_inference_requests_waiting", "requests queued, not yet scheduled"),
    "kv_cache_usage": ("gpuwarden_inference_kv_cache_usage_ratio", "KV cache in use (1: full)"),
}

Key = tuple[str, str, str, str]


class _Histogram:
    """Cumulative bucket counts and sum of one series; new bounds (a reconfigured server) start it again."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds, self.counts, self.sum = bounds, [0] * (len(bounds) + 1), 0.0

    def buckets(self) -> list[tuple[str, float]]:
        out, total = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts):
            total += n
            out.append((bound, float(total)))
        return out


class ServingSeries(Collector):
    """Every scraped service's series, built from the records the agent publishes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hist: dict[tuple[str, Key], _Histogram] = {}
        self._counters: dict[tuple[str, Key], float] = {}
        self._gauges: dict[tuple[str, Key], float] = {}
        self._info: dict[Key, tuple[str, str]] = {}  # -> GPUs, pid

    def observe(self, rec: InferenceMetrics) -> None:
        key = (rec.node, rec.service, rec.model, rec.engine)
        with self._lock:
            self._info[key] = (",".join(map(str, rec.gpu_indices)), "" if rec.pid is None else str(rec.pid))
            for h in rec.histograms:
                if h.name not in HISTOGRAMS:
                    continue
                bounds = tuple(h.bounds)
                cur = self._hist.get((h.name, key))
                if cur is None or cur.bounds != bounds:
                    cur = self._hist[h.name, key] = _Histogram(bounds)
                cur.counts = [a + b for a, b in zip(cur.counts, h.counts)]
                cur.sum += h.sum
            for c in rec.counters:
                name = "requests" if c.name in OUTCOMES else c.name
                if name in COUNTERS or name == "requests":
                    k = (OUTCOMES.get(c.name, c.name), key)
                    self._counters[k] = self._counters.get(k, 0.0) + c.delta
            for outcome in OUTCOMES.values():  # both outcomes exist once a service is seen
                self._counters.setdefault((outcome, key), 0.0)
            sums: dict[str, float] = {}
            for g in rec.gauges:  # series of one name (several engine indices) add up
                sums[g.name] = sums.get(g.name, 0.0) + g.value
            for name, value in sums.items():
                if name in GAUGES:
                    self._gauges[name, key] = value

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            hist, counters, gauges, info = dict(self._hist), dict(self._counters), dict(self._gauges), dict(self._info)
        for name, (series, doc) in HISTOGRAMS.items():
            fam = HistogramMetricFamily(series, doc, labels=LABELS)
            for (n, key), h in sorted(hist.items()):
                if n == name:
                    fam.add_metric(key, h.buckets(), h.sum)
            yield fam
        requests = CounterMetricFamily("gpuwarden_inference_requests", "finished requests, by outcome (failed: "
                                       "the engine's error outcomes, such as vLLM's abort)", labels=(*LABELS, "outcome"))
        for (n, key), v in sorted(counters.items()):
            if n in OUTCOMES.values():
                requests.add_metric((*key, n), v)
        yield requests
        for table, values, kind in ((COUNTERS, counters, CounterMetricFamily), (GAUGES, gauges, GaugeMetricFamily)):
            for name, (series, doc) in table.items():
                fam = kind(series, doc, labels=LABELS)
                for (n, key), v in sorted(values.items()):
                    if n == name:
                        fam.add_metric(key, v)
                yield fam
        services = GaugeMetricFamily("gpuwarden_inference_service_info", "a scraped service (1): the GPUs its "
                                     "process and children hold and its pid", labels=(*LABELS, "gpus", "pid"))
        for key, (gpus, pid) in sorted(info.items()):
            services.add_metric((*key, gpus, pid), 1.0)
        yield services
