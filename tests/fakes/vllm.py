"""A fake vLLM v0.10.2 ``/metrics`` endpoint: real ``prometheus_client`` objects on a loopback
HTTP server, with the metric names, label sets and bucket boundaries of
``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``) at that release, rendered by
``prometheus_client.generate_latest`` — so the agent's parser reads what vLLM writes.

``restart()`` makes a new registry (every counter from zero, new ``_created``), as a
restarted server does; ``mode`` makes it answer garbage, HTTP 500 or nothing (``down``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LABELS = ["model_name", "engine"]
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
FINISH_REASONS = ("stop", "length", "abort")


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

    def __init__(self, models: list[str]) -> None:
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
        self.itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             LABELS, buckets=ITL_BUCKETS, registry=r)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             LABELS, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", LABELS,
                               buckets=REQUEST_LATENCY_BUCKETS, registry=r)
        for m in models:  # vLLM binds every child at start (make_per_engine), so all series exist at 0
            for metric in (self.running, self.waiting, self.kv, self.preempt, self.prompt, self.gen,
                           self.ttft, self.itl, self.e2e, self.queue):
                metric.labels(m, "0")
            for reason in FINISH_REASONS:
                self.success.labels(m, "0", reason)

    def finish(self, model: str, req: Request) -> None:
        self.ttft.labels(model, "0").observe(req.ttft)
        for x in req.itl:
            self.itl.labels(model, "0").observe(x)
        self.e2e.labels(model, "0").observe(req.e2e)
        self.queue.labels(model, "0").observe(req.queue)
        self.prompt.labels(model, "0").inc(req.prompt_tokens)
        self.gen.labels(model, "0").inc(len(req.itl) + 1)
        self.success.labels(model, "0", req.finished_reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


@dataclass
class FakeVllm:
    """The endpoint: ``http://127.0.0.1:<port>/metrics`` serving ``metrics.render()``."""

    models: list[str]
    mode: str = "ok"  # ok | garbage | http500
    metrics: VllmMetrics = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = VllmMetrics(self.models)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if fake.mode == "http500":
                    body, status = b"internal error", 500
                elif fake.mode == "garbage":
                    body, status = b"<html>\n<body>{not: metrics}</body>\nvllm:num_requests_running{ 1 2 3\n", 200
                else:
                    body, status = fake.metrics.render(), 200
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def restart(self) -> None:
        """A restarted vLLM: the same endpoint, every total from zero."""
        self.metrics = VllmMetrics(self.models)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
