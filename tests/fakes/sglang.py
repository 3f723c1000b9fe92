"""A fake SGLang v0.5.2 ``/metrics`` endpoint: real ``prometheus_client`` objects with the names,
labels and default buckets of that release's ``sglang/srt/metrics/collector.py`` (read from its
PyPI wheel), counted when ``sglang/srt/managers/tokenizer_manager.py`` counts them:

* ``TokenizerMetricsCollector`` (labels ``model_name``): a request's prompt and generation tokens
  and ``sglang:num_requests_total`` when it finishes (``collect_metrics`` on a finished state,
  an abort reason included), ``sglang:num_aborted_requests_total`` when an abort is sent
  (``abort_request``), the TTFT, inter-token latency and end-to-end histograms;
* ``SchedulerMetricsCollector`` (labels ``model_name``, ``engine_type``, ``tp_rank``,
  ``pp_rank``): the running and queued requests and the token usage, as gauges.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.fakes.endpoint import FakeEndpoint

TTFT_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400]
E2E_BUCKETS = [0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400]
ITL_BUCKETS = [0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.100,
               0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000]
SCHEDULER_LABELS = ["model_name", "engine_type", "tp_rank", "pp_rank"]


@dataclass
class Finished:
    """One request that finished (its reason ``abort`` too, when aborted while it ran)."""

    ttft: float
    itl: list[float]
    e2e: float
    prompt_tokens: int


class SglangMetrics:
    """One server's collectors; a tokenizer manager serves one model (``--served-model-name``)."""

    def __init__(self, model: str) -> None:
        self.model = model
        r = self.registry = CollectorRegistry()
        tok = ["model_name"]
        self.prompt = Counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", tok, registry=r)
        self.gen = Counter("sglang:generation_tokens_total", "Number of generation tokens processed.", tok,
                           registry=r)
        self.cached = Counter("sglang:cached_tokens_total", "Number of cached prompt tokens.", tok, registry=r)
        self.requests = Counter("sglang:num_requests_total", "Number of requests processed.", tok, registry=r)
        self.so_requests = Counter("sglang:num_so_requests_total", "Number of structured output requests processed.",
                                   tok, registry=r)
        self.aborted = Counter("sglang:num_aborted_requests", "Number of requests aborted.", tok, registry=r)
        self.ttft = Histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              tok, buckets=TTFT_BUCKETS, registry=r)
        self.itl = Histogram("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             tok, buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds",
                             tok, buckets=E2E_BUCKETS, registry=r)
        sched = {"model_name": model, "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
        self.running = Gauge("sglang:num_running_reqs", "The number of running requests.", SCHEDULER_LABELS,
                             registry=r).labels(**sched)
        self.queued = Gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", SCHEDULER_LABELS,
                            registry=r).labels(**sched)
        Gauge("sglang:token_usage", "The token usage.", SCHEDULER_LABELS, registry=r).labels(**sched).set(0.3)

    def finish(self, req: Finished) -> None:
        """``collect_metrics`` for a finished request: its first token, intervals and totals."""
        m = self.model
        self.ttft.labels(m).observe(req.ttft)
        for x in req.itl:
            self.itl.labels(m).observe(x)
        self.prompt.labels(m).inc(req.prompt_tokens)
        self.gen.labels(m).inc(len(req.itl) + 1)
        self.requests.labels(m).inc()
        self.e2e.labels(m).observe(req.e2e)

    def abort(self) -> None:
        """``abort_request``: an abort sent to the scheduler (a request still queued never finishes)."""
        self.aborted.labels(self.model).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class FakeSglang(FakeEndpoint):
    """SGLang's endpoint for ``models[0]``."""

    def new_metrics(self) -> SglangMetrics:
        return SglangMetrics(self.models[0])
