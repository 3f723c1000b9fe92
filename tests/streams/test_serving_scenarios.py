"""Each inference rule fires on its serving scenario through ``gpuwarden run --simulate``, at
its tier and within its delay, with no other loud alert; a healthy service for 7 days raises
nothing above info."""

from __future__ import annotations

import pytest

from gpuwarden.producers.servingsim import MAX_BATCH, ONSET_S, SLO, ServingSim
from gpuwarden.producers.simulator import SCENARIOS
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.servingrules import RULES
from tests.streams.scenario_table import INFERENCE_CASES, START

_RUNS: dict[tuple, list[dict]] = {}


@pytest.mark.parametrize("scenario,rule,tier,delay,span", INFERENCE_CASES, ids=[f"{c[0]}:{c[1]}" for c in INFERENCE_CASES])
def test_inference_rule_fires_on_its_scenario(run_cli, scenario, rule, tier, delay, span) -> None:
    key = (scenario, span)
    if key not in _RUNS:  # one run per scenario; the GPUs as small as the simulator allows
        _RUNS[key] = run_cli("--simulate", scenario, "--duration", span, "--start", str(START), "--gpus", "2")
    out = _RUNS[key]
    t = next((x for x in out if x["rule"] == rule and x["state"] == "firing"), None)
    assert t is not None, f"{rule} never fired on {scenario}: {sorted({x['rule'] for x in out})}"
    assert t["tier"] == tier and t["summary"] and t["action"]
    assert 0 <= t["ts"] - (START + ONSET_S) <= delay
    expected = {c[1] for c in INFERENCE_CASES if c[0] == scenario}
    loud = {x["rule"] for x in out if x["state"] == "firing" and x["tier"] != "info"}
    assert loud <= expected, f"false alerts on {scenario}: {sorted(loud - expected)}"


def test_every_inference_rule_and_serving_scenario_has_a_case() -> None:
    assert {c[1] for c in INFERENCE_CASES} == set(RULES)
    serving = {n for n, s in SCENARIOS.items() if s.placement == "serving"} - {"serving-healthy"}
    assert serving == {c[0] for c in INFERENCE_CASES}


def test_healthy_serving_for_7_days_raises_nothing_above_info() -> None:
    """The diurnal load, 7 simulated days, scraped each minute (the stage sees the same minutes)."""
    stage = Engine(config=EngineConfig.model_validate({"slo": {"chat": SLO},
                                                       "serving": {"chat": {"max_batch": MAX_BATCH["chat"]}}}))
    sim = ServingSim("serving-healthy", node="gn1", boot_id="b", seed=1, start_ts=START, pid=7, gpus=[1], scrape_s=60.0)
    out, ts, seq = [], sim.next_ts, 0
    while ts <= START + 7 * 86400:
        rec = sim.scrape(ts, seq)
        assert rec is not None
        out += stage.process(rec)
        ts, seq = ts + 60.0, seq + 1
    out += stage.flush()
    assert [(t.rule, t.tier.value) for t in out if t.tier.value != "info"] == []
    view = stage.inference.views()[0]
    assert view.ttft_p99 == "≤ 0.75 s" and min(view.budget_remaining.values()) > 0.9
    assert min(stage.services.budgets("chat").values()) > 0.9  # the service stage judged it too
