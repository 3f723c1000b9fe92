"""Each engine's names at the release they were read from (producers/servingnames.py), scraped
from a fake server that writes what that release writes: SGLang v0.5.2's request, abort and
token counters (tests/fakes/sglang.py); vLLM's inter-token latency under its name before v0.10.2
(``vllm:time_per_output_token_seconds``), after (``vllm:inter_token_latency_seconds``) and in
v0.10.2-v0.11, which write both with the same observations (tests/fakes/vllm.py)."""

from __future__ import annotations

import pytest

from gpuwarden.contract import InferenceMetrics
from gpuwarden.producers.config import InferenceConfig
from gpuwarden.producers.inference import InferenceScraper
from tests.fakes.sglang import ITL_BUCKETS, FakeSglang, Finished
from tests.fakes.vllm import ITL, OLD_ITL, FakeVllm, Request

T0 = 1_700_000_000.0


def scraped(server, engine: str, act) -> InferenceMetrics:
    """The record of the interval in which ``act()`` happened on ``server``."""
    clock = [T0]
    s = InferenceScraper(InferenceConfig(targets=[{"url": server.url, "engine": engine, "service": "chat"}],
                                         timeout=1.0), node="n", boot_id="b", clock=lambda: clock[0])
    try:
        assert s.scrape_all() == []  # the baseline
        act()
        clock[0] += 60
        (rec,) = s.scrape_all()
    finally:
        server.close()
    return rec


def totals(rec: InferenceMetrics) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in rec.counters:
        out[c.name] = out.get(c.name, 0.0) + c.delta
    return out


def test_sglang_requests_aborts_and_tokens() -> None:
    """Three requests finish (100 prompt tokens each, a first token and 9 more: 10 generated), two
    aborts are sent: requests 3, failed 2, prompt 300, generation 30 tokens; 3 TTFTs, 27 ITLs."""
    server = FakeSglang(["org/chat-13b"])

    def act() -> None:
        for _ in range(3):
            server.metrics.finish(Finished(ttft=0.3, itl=[0.02] * 9, e2e=1.0, prompt_tokens=100))
        server.metrics.abort()
        server.metrics.abort()
        server.metrics.running.set(5)
        server.metrics.queued.set(2)

    rec = scraped(server, "sglang", act)
    assert (rec.engine, rec.model) == ("sglang", "org/chat-13b")
    assert totals(rec) == {"requests": 3.0, "requests_failed": 2.0, "prompt_tokens": 300.0, "generation_tokens": 30.0}
    assert {c.metric for c in rec.counters if c.name == "requests_failed"} == {"sglang:num_aborted_requests"}
    hist = {h.name: h for h in rec.histograms}
    assert hist["ttft"].count == 3 and hist["itl"].count == 27 and hist["e2e"].count == 3
    assert hist["itl"].bounds == ITL_BUCKETS and hist["itl"].counts[ITL_BUCKETS.index(0.020)] == 27
    gauges = {g.name: g.value for g in rec.gauges}
    assert gauges == {"requests_running": 5.0, "requests_waiting": 2.0, "kv_cache_usage": 0.3}


@pytest.mark.parametrize("families, metric", [
    ((OLD_ITL,), OLD_ITL),  # v0.10.1.1 and before
    ((ITL, OLD_ITL), ITL),  # v0.10.2, v0.11: both, the same observations: counted once
    ((ITL,), ITL),  # v0.13 on
], ids=["before-0.10.2", "0.10.2-0.11", "0.13"])
def test_vllm_inter_token_latency_under_either_name_counted_once(families, metric) -> None:
    server = FakeVllm(["m"], itl_families=families)
    rec = scraped(server, "vllm", lambda: server.metrics.finish(
        "m", Request(ttft=0.2, itl=[0.02, 0.03, 0.2], e2e=1.0, queue=0.01, prompt_tokens=10)))
    (itl,) = [h for h in rec.histograms if h.name == "itl"]
    assert itl.metric == metric and itl.count == 3 and itl.sum == pytest.approx(0.25)
