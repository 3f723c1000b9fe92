"""A fake vLLM ``/metrics`` endpoint: real ``prometheus_client`` objects on a loopback HTTP
server, with the metric names, label sets and bucket boundaries of ``vllm/v1/metrics/loggers.py``
(``PrometheusStatLogger``) at v0.10.2 and v0.11.0 (the same there), rendered by
``prometheus_client.generate_latest`` — so the agent's parser reads what vLLM writes. Both
releases write the inter-token latency twice, as ``vllm:inter_token_latency_seconds`` and the
deprecated ``vllm:time_per_output_token_seconds``; v0.10.1.1 and earlier only the latter
(``itl_families``).

``restart()`` makes a new registry (every counter from zero, new ``_created``), as a
restarted server does; ``mode`` makes it answer garbage, HTTP 500 or nothing (``down``).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.fakes.endpoint import FakeEndpoint

LABELS = ["model_name", "engine"]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
FINISH_REASONS = ("stop", "length", "abort")
ITL, OLD_ITL = "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"


@dataclass
class Request:
    """One finished request as vLLM records it."""

    ttft: float
    itl: list[float]
    e2e: float
    queue: float
    prompt_tokens: int
    finished_reason: str = "stop"


class VllmMetrics:
    """vLLM's metric objects for ``models`` (one engine index each, ``engine="0"``)."""

    def __init__(self, models: list[str], itl_families: tuple[str, ...] = (ITL, OLD_ITL)) -> None:
        self.models = models
        self.registry = CollectorRegistry()
        r = self.registry
        self.running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                             LABELS, registry=r)
        self.waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                             LABELS, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", LABELS, registry=r)
        self.preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                               LABELS, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LABELS, registry=r)
        self.gen = Counter("vllm:generation_tokens", "Number of generation tokens processed.", LABELS, registry=r)
        self.success = Counter("vllm:request_success", "Count of successfully processed requests.",
                               [*LABELS, "finished_reason"], registry=r)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              LABELS, buckets=TTFT_BUCKETS, registry=r)
        self.itls = [Histogram(name, "Histogram of inter-token latency in seconds.", LABELS, buckets=ITL_BUCKETS,
                               registry=r) for name in itl_families]
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             LABELS, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", LABELS,
                               buckets=REQUEST_LATENCY_BUCKETS, registry=r)
        for m in models:  # vLLM binds every child at start (make_per_engine), so all series exist at 0
            for metric in (self.running, self.waiting, self.kv, self.preempt, self.prompt, self.gen,
                           self.ttft, *self.itls, self.e2e, self.queue):
                metric.labels(m, "0")
            for reason in FINISH_REASONS:
                self.success.labels(m, "0", reason)

    def finish(self, model: str, req: Request) -> None:
        self.ttft.labels(model, "0").observe(req.ttft)
        for x in req.itl:
            self.observe_itl(model, x)
        self.e2e.labels(model, "0").observe(req.e2e)
        self.queue.labels(model, "0").observe(req.queue)
        self.prompt.labels(model, "0").inc(req.prompt_tokens)
        self.gen.labels(model, "0").inc(len(req.itl) + 1)
        self.success.labels(model, "0", req.finished_reason).inc()

    def observe_itl(self, model: str, seconds: float) -> None:
        """One inter-token interval, in every ITL family the release writes."""
        for itl in self.itls:
            itl.labels(model, "0").observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class FakeVllm(FakeEndpoint):
    """vLLM's endpoint; ``itl_families`` the ITL histograms its release writes."""

    itl_families: tuple[str, ...] = (ITL, OLD_ITL)

    def new_metrics(self) -> VllmMetrics:
        return VllmMetrics(self.models, self.itl_families)
