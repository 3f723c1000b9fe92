"""SLO arithmetic against the Google SRE workbook's worked numbers ("Alerting on SLOs",
https://sre.google/workbook/alerting-on-slos/), for a 99.9 % SLO over 30 days."""

from __future__ import annotations

import pytest

from gpuwarden.contract import Tier
from gpuwarden.streams.config import EngineConfig
from gpuwarden.slo import DEFAULT_ALERTS, Events, budget_remaining, burn_rate, error_events

DAY, HOUR, MIN = 86400.0, 3600.0, 60.0
WINDOW = 30 * DAY
BUDGET = 0.001  # 99.9 %


@pytest.mark.parametrize("burn, span, spent", [(14.4, 1 * HOUR, 0.02), (6.0, 6 * HOUR, 0.05), (1.0, 3 * DAY, 0.10)])
def test_the_workbooks_burn_rates_and_what_they_spend(burn: float, span: float, spent: float) -> None:
    """A burn rate b held for t spends b·t/window of the budget: the default pairs' factors over their
    long windows spend the workbook's 2 %, 5 % and 10 % of a 30-day budget."""
    (pair,) = [a for a in DEFAULT_ALERTS if a.long_s == span]
    assert pair.factor == burn
    assert burn * span / WINDOW == pytest.approx(spent)


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
