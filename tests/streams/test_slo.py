"""SLO arithmetic against the Google SRE workbook's worked numbers ("Alerting on SLOs",
https://sre.google/workbook/alerting-on-slos/), for a 99.9 % SLO over 30 days."""

from __future__ import annotations

import pytest

from gpuwarden.contract import Tier
from gpuwarden.streams.config import EngineConfig
from gpuwarden.slo import (
    DEFAULT_ALERTS,
    Events,
    Interval,
    budget_remaining,
    budget_spent,
    burn_for,
    burn_rate,
    error_events,
    evaluate,
    in_window,
)

DAY, HOUR, MIN = 86400.0, 3600.0, 60.0
WINDOW = 30 * DAY
BUDGET = 0.001  # 99.9 %


@pytest.mark.parametrize("burn, span, spent", [(14.4, 1 * HOUR, 0.02), (6.0, 6 * HOUR, 0.05), (1.0, 3 * DAY, 0.10)])
def test_the_workbooks_burn_rates_and_what_they_spend(burn: float, span: float, spent: float) -> None:
    assert budget_spent(burn, span, WINDOW) == pytest.approx(spent)
    assert burn_for(spent, span, WINDOW) == pytest.approx(burn)


def test_the_default_pairs_are_the_workbooks() -> None:
    got = [(a.long_s, a.short_s, a.factor, a.tier) for a in DEFAULT_ALERTS]
    assert got == [(HOUR, 5 * MIN, 14.4, Tier.CRITICAL), (6 * HOUR, 30 * MIN, 6.0, Tier.ATTENTION),
                   (3 * DAY, 6 * HOUR, 1.0, Tier.INFO)]


def test_a_total_outage_burns_at_1000x_and_spends_30_days_of_budget_in_43_minutes() -> None:
    burn = burn_rate(Events(good=0, total=500), BUDGET)
    assert burn == pytest.approx(1000.0)
    assert WINDOW / burn / MIN == pytest.approx(43.2)


def test_burn_rate_and_budget_remaining() -> None:
    ev = Events(good=99_856, total=100_000)  # 0.144 % bad
    assert burn_rate(ev, BUDGET) == pytest.approx(1.44)
    assert budget_remaining(Events(good=999_500, total=1_000_000), BUDGET) == pytest.approx(0.5)
    assert budget_remaining(Events(good=998_000, total=1_000_000), BUDGET) == pytest.approx(-1.0)
    assert burn_rate(Events(0, 0), BUDGET) == 0.0 and budget_remaining(Events(0, 0), BUDGET) == 1.0
    assert error_events(finished=990, failed=10) == Events(good=990, total=1000)


def series(now: float, span: float, step: float, bad_fraction: float, per_step: int = 1000) -> list[Interval]:
    bad = round(per_step * bad_fraction)
    n = int(span // step)
    return [Interval(now - span + (i + 1) * step, Events(per_step - bad, per_step)) for i in range(n)]


def test_fast_burn_needs_the_long_and_the_short_window() -> None:
    now = 10 * DAY
    healthy = series(now - 5 * MIN, 3 * DAY, 15.0, 0.0)
    # 20 % bad for the last 5 minutes only: the short window burns at 200x, the hour only ~16.7x
    spike = healthy + series(now, 5 * MIN, 15.0, 0.2)
    fast = evaluate(spike, now, BUDGET)[0]
    assert fast.short_burn == pytest.approx(200.0) and fast.long_burn == pytest.approx(200 / 12)
    assert fast.firing
    # a 2-minute spike 10 minutes ago: the hour still burns, the last 5 minutes do not: no page
    old = series(now - 10 * MIN, 3 * DAY, 15.0, 0.0)
    old[-8:] = [Interval(iv.end, Events(500, 1000)) for iv in old[-8:]]
    old += series(now, 10 * MIN, 15.0, 0.0)
    v = evaluate(old, now, BUDGET)[0]
    assert v.long_burn == pytest.approx(8 * 500 / 240_000 / BUDGET) and v.long_burn >= 14.4
    assert v.short_burn == 0.0 and not v.firing


def test_a_steady_slow_burn_is_attention_not_a_page() -> None:
    now = 10 * DAY
    ivs = series(now, 3 * DAY, 60.0, 0.008)  # 8x, everywhere
    verdicts = {v.alert.name: v for v in evaluate(ivs, now, BUDGET)}
    assert not verdicts["fast_burn"].firing
    assert verdicts["slow_burn"].firing and verdicts["slow_burn"].alert.tier is Tier.ATTENTION
    assert verdicts["steady_burn"].firing
    assert in_window(ivs, now, HOUR).total == 60 * 1000


def test_slo_config_per_service() -> None:
    cfg = EngineConfig.model_validate(
        {"slo": {"chat": {"ttft_p99": "2.5s", "itl_p99": "100ms", "error_rate": "1%", "window": "30d"},
                 "batch": {"e2e_p95": 60}}})
    chat = cfg.slo["chat"]
    assert chat.error_rate == pytest.approx(0.01) and chat.window == WINDOW
    assert [(o.metric, o.q, o.threshold_s) for o in chat.objectives()] == [("itl", 0.99, 0.1), ("ttft", 0.99, 2.5)]
    assert cfg.slo["batch"].objectives()[0].budget == pytest.approx(0.05)
    for bad in ({"ttft_p100": "1s"}, {"latency": {"tpot_p99": "1s"}}, {"error_rate": "150%"}):
        with pytest.raises(ValueError):
            EngineConfig.model_validate({"slo": {"x": bad}})
