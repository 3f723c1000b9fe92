"""The serving engines on the agent's /metrics: a vLLM v0.10.2 endpoint rendered by the real
prometheus_client (tests/fakes/vllm.py), scraped by the agent's scraper, added up again into
cumulative series under one set of names, through a restart of the server."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.exposition import render
from gpuwarden.producers.config import InferenceConfig
from gpuwarden.producers.inference import InferenceScraper
from gpuwarden.producers.metrics import AgentMetrics
from tests.fakes.vllm import TTFT_BUCKETS, FakeVllm, Request

LABELS = {"node": "node-0", "service": "chat", "model": "m1", "engine": "vllm"}


def finish(server: FakeVllm, ttft: float, reason: str = "stop") -> None:
    server.metrics.finish("m1", Request(ttft=ttft, itl=[0.02, 0.03], e2e=ttft + 1.0, queue=0.01, prompt_tokens=10,
                                        finished_reason=reason))


def test_deltas_add_up_to_the_engines_counts_since_the_first_scrape_and_through_a_restart() -> None:
    server = FakeVllm(["m1"])
    try:
        cfg = InferenceConfig(targets=[{"url": server.url, "engine": "vllm", "service": "chat", "gpus": [0, 1]}])
        scraper = InferenceScraper(cfg, node="node-0", boot_id="b", clock=lambda: 1_700_000_000.0)
        m = AgentMetrics()
        finish(server, 0.05)  # before the first scrape: the server's past, not counted
        m.observe(scraper.scrape_all())
        finish(server, 0.05)
        finish(server, 0.3, reason="abort")
        server.metrics.kv.labels("m1", "0").set(0.75)
        m.observe(scraper.scrape_all())
        server.restart()  # every total from zero
        finish(server, 2.0)
        m.observe(scraper.scrape_all())
        scraper.stop()
    finally:
        server.close()
    v = m.registry.get_sample_value
    assert v("gpuwarden_inference_requests_total", {**LABELS, "outcome": "ok"}) == 2
    assert v("gpuwarden_inference_requests_total", {**LABELS, "outcome": "failed"}) == 1
    assert v("gpuwarden_inference_time_to_first_token_seconds_count", LABELS) == 3
    assert v("gpuwarden_inference_time_to_first_token_seconds_sum", LABELS) == 2.35
    # The engine's own bounds, cumulative as Prometheus reads them.
    assert v("gpuwarden_inference_time_to_first_token_seconds_bucket", {**LABELS, "le": "0.06"}) == 1
    assert v("gpuwarden_inference_time_to_first_token_seconds_bucket", {**LABELS, "le": "0.5"}) == 2
    assert v("gpuwarden_inference_time_to_first_token_seconds_bucket", {**LABELS, "le": "+Inf"}) == 3
    assert v("gpuwarden_inference_inter_token_latency_seconds_count", LABELS) == 6
    assert v("gpuwarden_inference_generation_tokens_total", LABELS) == 9
    assert v("gpuwarden_inference_kv_cache_usage_ratio", LABELS) == 0  # the restarted server's gauge
    assert v("gpuwarden_inference_service_info", {**LABELS, "gpus": "0,1", "pid": ""}) == 1
    text = render(m.registry).decode()
    (ttft,) = [f for f in text_string_to_metric_families(text) if f.name == "gpuwarden_inference_time_to_first_token_seconds"]
    assert ttft.type == "histogram"
    assert len([s for s in ttft.samples if s.name.endswith("_bucket")]) == len(TTFT_BUCKETS) + 1
