"""Quantiles from buckets against numpy on the raw samples that produced them: the samples go
through vLLM v0.10.2's own TTFT/ITL histograms (real prometheus_client, tests/fakes/vllm.py),
are scraped by the agent, and the bucket a quantile is placed in must hold numpy's value."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuwarden.producers.config import InferenceConfig
from gpuwarden.producers.inference import InferenceScraper
from gpuwarden.streams.quantiles import Buckets, merge, quantile
from gpuwarden.slo import judge, latency_events
from tests.fakes.vllm import FakeVllm, Request

QS = (0.5, 0.95, 0.99)


def scraped(samples: np.ndarray, name: str, batches: int = 3) -> Buckets:
    """``samples`` observed by a fake vLLM over ``batches`` scrape intervals, merged back."""
    server = FakeVllm(["m"])
    clock = [1_700_000_000.0]
    s = InferenceScraper(InferenceConfig(targets=[{"url": server.url, "engine": "vllm", "service": "x"}]),
                         node="n", boot_id="b", clock=lambda: clock[0])
    try:
        s.scrape_all()
        parts = []
        for chunk in np.array_split(samples, batches):
            for x in chunk:
                if name == "ttft":
                    server.metrics.finish("m", Request(ttft=float(x), itl=[], e2e=float(x), queue=0.0,
                                                       prompt_tokens=1))
                else:
                    server.metrics.observe_itl("m", float(x))
            clock[0] += 15
            (rec,) = s.scrape_all()
            (h,) = [h for h in rec.histograms if h.name == name]
            parts.append(Buckets(tuple(h.bounds), tuple(h.counts)))
    finally:
        server.close()
    return merge(parts)


@pytest.mark.parametrize("seed, sigma", [(1, 0.6), (2, 1.2), (3, 0.3)])
def test_the_bucket_holds_numpys_quantile_of_the_raw_samples(seed: int, sigma: float) -> None:
    rng = np.random.default_rng(seed)
    samples = rng.lognormal(mean=math.log(0.4), sigma=sigma, size=3000)
    b = scraped(samples, "ttft")
    assert b.total == len(samples)
    for q in QS:
        got = quantile(b, q)
        exact = float(np.quantile(samples, q, method="inverted_cdf"))
        assert got.lower < exact <= got.upper, (q, got, exact)
        assert got.lower <= got.estimate <= got.upper
        # the estimate is only as good as the bucket: within its width of the truth
        assert abs(got.estimate - exact) <= got.upper - got.lower


def test_itl_quantiles_with_vllms_itl_buckets() -> None:
    rng = np.random.default_rng(7)
    samples = np.concatenate([rng.normal(0.03, 0.005, 5000).clip(0.001), rng.uniform(0.2, 0.6, 100)])
    b = scraped(samples, "itl")
    for q in QS:
        got = quantile(b, q)
        exact = float(np.quantile(samples, q, method="inverted_cdf"))
        assert got.lower < exact <= got.upper


def test_a_p99_between_1_and_2_5_s_is_only_known_to_be_at_most_2_5_s() -> None:
    rng = np.random.default_rng(11)
    samples = np.concatenate([rng.uniform(0.1, 0.9, 970), rng.uniform(1.1, 2.2, 30)])
    b = scraped(samples, "ttft", batches=1)
    p99 = quantile(b, 0.99)
    assert (p99.lower, p99.upper) == (1.0, 2.5)
    assert p99.statement().startswith("p99 ≤ 2.5 s (in (1, 2.5] s; ≈")
    assert "interpolated" in p99.statement()
    assert float(np.quantile(samples, 0.99, method="inverted_cdf")) < 2.5
    # a "2 s" objective cannot be judged from these buckets: judged at 1.0, the 30 in (1, 2.5] undecided
    j = judge(b.bounds, 2.0)
    assert (j.judged_at, j.next_bound, j.exact) == (1.0, 2.5, False)
    assert "judged at 1 s (the nearest bound at or below)" in j.note()
    ev = latency_events(b.bounds, b.counts, 2.0)
    assert (ev.good, ev.total, ev.undecided) == (970, 1000, 30)
    exact_ev = latency_events(b.bounds, b.counts, 2.5)  # 2.5 s is a bound: judged exactly
    assert (exact_ev.good, exact_ev.undecided) == (1000, 0) and judge(b.bounds, 2.5).exact


def test_above_the_highest_bound_and_empty() -> None:
    b = Buckets((1.0, 2.0), (0, 1, 99))
    got = quantile(b, 0.5)
    assert got.upper == math.inf and got.estimate is None and got.statement().startswith("p50 > 2 s")
    assert quantile(Buckets((1.0,), (0, 0)), 0.99) is None
    with pytest.raises(ValueError, match="bounds differ"):
        merge([Buckets((1.0,), (1, 0)), Buckets((2.0,), (1, 0))])
