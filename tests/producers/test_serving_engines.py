"""TGI and Triton metric names (producers/servingnames.py) read by the scraper's parser, from
exposition rendered by the real prometheus_client in those names, and from the bare-counter
text both servers actually write (their exporters add no ``_total``: TGI's Rust
``metrics-exporter-prometheus``, Triton's prometheus-cpp; Triton's docs show
``nv_inference_request_success{model="my_model",version="1"} 161``).

Names, types and labels: TGI ``docs/source/reference/metrics.md`` and ``router/src/infer/mod.rs``
(``tgi_request_failure`` by ``err``); Triton ``docs/user_guide/metrics.md`` (server) and
``src/metric_model_reporter.cc`` (core: the first-response histogram, decoupled models, with
``--metrics-config histogram_latencies=true``, in milliseconds). Bucket bounds here are the
test's own: both servers let the operator set them.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gpuwarden.producers.config import InferenceTarget
from gpuwarden.producers.inference import TargetState, _engine_of, parse
from gpuwarden.producers.servingnames import TGI, TRITON

TGI_BOUNDS = [0.05, 0.1, 0.5, 1.0, 5.0, 30.0]
TOKEN_BOUNDS = [16.0, 64.0, 256.0, 1024.0, 4096.0]
TRITON_MS = [1.0, 5.0, 10.0, 50.0, 100.0, 500.0, 2000.0]


class Tgi:
    """TGI's families in one registry (a server's lifetime)."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.e2e = Histogram("tgi_request_duration", "e2e latency", buckets=TGI_BOUNDS, registry=r)
        self.queue = Histogram("tgi_request_queue_duration", "queue time", buckets=TGI_BOUNDS, registry=r)
        self.inp = Histogram("tgi_request_input_length", "input tokens", buckets=TOKEN_BOUNDS, registry=r)
        self.gen = Histogram("tgi_request_generated_tokens", "generated tokens", buckets=TOKEN_BOUNDS, registry=r)
        self.ok = Counter("tgi_request_success", "successful requests", registry=r)
        self.failed = Counter("tgi_request_failure", "failed requests", ["err"], registry=r)
        Gauge("tgi_queue_size", "queue size", registry=r).set(3)
        Gauge("tgi_batch_current_size", "batch size", registry=r).set(12)

    def finish(self, seconds: float, n_in: int, n_out: int) -> None:
        self.e2e.observe(seconds)
        self.queue.observe(seconds / 10)
        self.inp.observe(n_in)
        self.gen.observe(n_out)
        self.ok.inc()


class Triton:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        labels = ["model", "version"]
        self.first = Histogram("nv_inference_first_response_histogram_ms", "time to first response in ms", labels,
                               buckets=TRITON_MS, registry=r).labels("llama", "1")
        self.ok = Counter("nv_inference_request_success", "successful requests", labels, registry=r).labels("llama", "1")
        self.failed = Counter("nv_inference_request_failure", "failed requests", labels, registry=r).labels("llama", "1")
        Gauge("nv_inference_pending_request_count", "pending", labels, registry=r).labels("llama", "1").set(4)


def bare(text: bytes) -> str:
    """The same exposition as the servers write it: counters without ``_total``, no ``_created``."""
    out = []
    for line in text.decode().splitlines():
        if "_created" in line:
            continue
        out.append(line.replace("_total{", "{").replace("_total ", " "))
    return "\n".join(out) + "\n"


def deltas(engine: str, before: str, after: str):
    state = TargetState(InferenceTarget(url="http://127.0.0.1:3000/metrics", engine=engine, service="svc"))
    names = TGI if engine == "tgi" else TRITON
    assert state.advance(parse(before, names), 0.0) == (None, 0, {})
    start, resets, models = state.advance(parse(after, names), 15.0)
    assert start == 0.0 and resets == 0
    return models


@pytest.mark.parametrize("render", [lambda r: generate_latest(r).decode(), lambda r: bare(generate_latest(r))],
                         ids=["prometheus_client", "as-served"])
def test_tgi_families_become_our_names(render) -> None:
    tgi = Tgi()
    tgi.finish(0.4, 100, 50)
    before = render(tgi.registry)
    tgi.finish(0.8, 300, 200)
    tgi.finish(6.0, 20, 900)
    tgi.failed.labels("overloaded").inc(2)  # series that appear on their first failure
    tgi.failed.labels("validation").inc()
    after = render(tgi.registry)
    assert _engine_of(after) == "tgi"
    (model,) = models = deltas("tgi", before, after)
    parts = models[model]
    assert model == "unknown"  # TGI serves one model and does not label it: the target's service names it
    e2e = {h.name: h for h in parts.histograms}["e2e"]
    assert e2e.metric == "tgi_request_duration" and e2e.bounds == TGI_BOUNDS and e2e.count == 2
    assert e2e.counts[TGI_BOUNDS.index(1.0)] == 1 and e2e.counts[TGI_BOUNDS.index(30.0)] == 1
    assert {h.name for h in parts.histograms} == {"e2e", "queue"}  # no TTFT or ITL histogram in TGI
    got = {}
    for c in parts.counters:
        got[c.name] = got.get(c.name, 0.0) + c.delta
    assert got == {"requests": 2.0, "requests_failed": 3.0, "prompt_tokens": 320.0, "generation_tokens": 1100.0}
    assert {g.name: g.value for g in parts.gauges} == {"requests_waiting": 3.0, "requests_running": 12.0}


@pytest.mark.parametrize("render", [lambda r: generate_latest(r).decode(), lambda r: bare(generate_latest(r))],
                         ids=["prometheus_client", "as-served"])
def test_triton_first_response_histogram_is_read_in_seconds(render) -> None:
    triton = Triton()
    triton.first.observe(3.0)
    triton.ok.inc()
    before = render(triton.registry)
    for ms in (40.0, 40.0, 900.0):
        triton.first.observe(ms)
    triton.ok.inc(3)
    triton.failed.inc(2)
    after = render(triton.registry)
    assert _engine_of(after) == "triton"
    models = deltas("triton", before, after)
    parts = models["llama"]
    (ttft,) = parts.histograms
    assert ttft.name == "ttft" and ttft.metric == "nv_inference_first_response_histogram_ms"
    assert ttft.bounds == pytest.approx([b / 1000 for b in TRITON_MS])  # ms on the wire, seconds in the record
    assert ttft.count == 3 and ttft.counts[TRITON_MS.index(50.0)] == 2 and ttft.counts[TRITON_MS.index(2000.0)] == 1
    assert ttft.sum == pytest.approx(0.98)
    assert {c.name: c.delta for c in parts.counters} == {"requests": 3.0, "requests_failed": 2.0}
    assert [(g.name, g.value, g.labels) for g in parts.gauges] == [("requests_waiting", 4.0, {"version": "1"})]
