"""The error budget left over an SLO window (``gpuwarden.slo.service_budgets``), worked by hand.

Service ``chat`` (``ttft_p99: 2s``, ``error_rate: 1%``, 30 d window) on two nodes, hourly
intervals for 2 days, 1,000 finished requests an hour on each: 96,000 events. gn2 fails 20 an
hour on the second day: 480 bad, 0.5 % of the events, a burn rate of 0.5 (half the 1 % budget).
Seen for 2 of 30 days, the traffic seen taken as the window's rate: 0.5 x 2/30 = 1/30 of the
budget spent, 96.67 % left. TTFT buckets ``(1.0, 2.5, 5.0)`` per hour ``[990, 5, 5, 0]``: a
2 s threshold lies between bounds, so it is judged at 1.0 s (the 5 in (1, 2.5] undecided, counted
bad): 10 bad in 1,000, a burn of 1.0, 2/30 spent, 93.33 % left.
"""

from __future__ import annotations

import pytest

from gpuwarden.contract import CounterDelta, HistogramDelta, InferenceMetrics
from gpuwarden.slo import Events, ServiceSlo, record_events, service_budgets

T0 = 1_700_000_000.0
H = 3600.0
SLO = ServiceSlo.model_validate({"ttft_p99": "2s", "error_rate": "1%", "window": "30d"})


def _rec(node: str, hour: int, failed: float) -> InferenceMetrics:
    ts = T0 + H * (hour + 1)
    return InferenceMetrics(
        ts=ts, start_ts=ts - H, node=node, seq=hour, boot_id="b", engine="vllm", service="chat", model="m",
        url="http://127.0.0.1:8000/metrics", gpu_indices=[0],
        histograms=[HistogramDelta(name="ttft", metric="vllm:time_to_first_token_seconds", bounds=[1.0, 2.5, 5.0],
                                   counts=[990, 5, 5, 0], count=1000, sum=500.0)],
        counters=[CounterDelta(name="requests", metric="vllm:request_success", delta=1000.0 - failed),
                  CounterDelta(name="requests_failed", metric="vllm:request_success", delta=failed)])


def _two_days() -> list[InferenceMetrics]:
    return [_rec(node, h, 20.0 if node == "gn2" and h >= 24 else 0.0) for node in ("gn1", "gn2") for h in range(48)]


def test_one_record_gives_each_objectives_events() -> None:
    got = record_events(_rec("gn2", 30, 20.0), SLO)
    assert got == {"ttft_p99": Events(990, 1000, 5), "error_rate": Events(980, 1000)}


def test_budget_over_the_two_days_seen_of_a_30_day_window() -> None:
    recs = _two_days()
    until = T0 + 48 * H + 1
    budgets = {b.objective: b for b in service_budgets(recs + recs[:7], {"chat": SLO}, until)}  # 7 repeated
    err, ttft = budgets["error_rate"], budgets["ttft_p99"]
    assert (err.events.total, err.events.bad, err.target) == (96_000, 480, pytest.approx(0.99))
    assert err.remaining == pytest.approx(1 - 0.5 * 2 / 30)
    assert (ttft.events.total, ttft.events.bad, ttft.events.undecided) == (96_000, 960, 480)
    assert ttft.remaining == pytest.approx(1 - 1.0 * 2 / 30)
    assert err.partial and err.seen_s == pytest.approx(48 * H, abs=1)
    assert err.coverage() == "over the 2 d seen of a 30 d window"
    assert err.values()["remaining"] == pytest.approx(0.966667, abs=1e-6)


def test_a_window_the_history_covers_and_records_outside_it() -> None:
    day = ServiceSlo.model_validate({"error_rate": "1%", "window": "1d"})
    until = T0 + 48 * H + 1
    late = _rec("gn1", 60, 1000.0)  # after ``until``: not counted
    (b,) = service_budgets([*_two_days(), late], {"chat": day}, until)
    # the last day only (records before it say the history covers the window): 480 bad of 48,000 = 1 %
    assert (b.events.total, b.events.bad, b.partial) == (48_000, 480, False)
    assert b.remaining == pytest.approx(0.0) and b.coverage() == "over the 1 d window"
    assert service_budgets(_two_days(), {"other": day}, until) == []  # no SLO declared: no budget
