"""Inference services in ``gpuwarden report usage`` and the weekly digest, worked by hand.

One service on 2 GPUs for an hour, scraped each minute: 50 minutes at 1,000 output tokens/s
(3.0 M tokens), 10 minutes with no request and none running (idle). GPU-hours: 1 h x 2 = 2;
idle: 10 min x 2 GPUs = 1/3. At $2 per GPU-hour the hour costs $4: $4 / 3.0 M = $1.3333 per
million output tokens; 3.0 M tokens / 3,600 s = 833.3 tokens/s, 416.7 per GPU.
"""

from __future__ import annotations

import pytest

from gpuwarden.contract import CounterDelta, GaugeValue, InferenceMetrics, Topics, batch_task_metrics, encode, record_key
from gpuwarden.history.accounting import compute_usage, digest_record, spool_records, to_json, to_table
from gpuwarden.spool import Spool

T0 = 1_700_000_000.0


def _records() -> list[InferenceMetrics]:
    out = []
    for n in range(60):
        busy = n < 50
        ts = T0 + 60 * (n + 1)
        out.append(InferenceMetrics(
            ts=ts, start_ts=ts - 60, node="gn1", seq=n, boot_id="b", engine="vllm", service="chat",
            model="qwen2-72b", url="http://127.0.0.1:8000/metrics", pid=9, gpu_indices=[0, 1],
            counters=[CounterDelta(name="requests", metric="vllm:request_success", delta=300.0 if busy else 0.0),
                      CounterDelta(name="requests_failed", metric="vllm:request_success", delta=3.0 if busy else 0.0),
                      CounterDelta(name="generation_tokens", metric="vllm:generation_tokens",
                                   delta=60_000.0 if busy else 0.0)],
            gauges=[GaugeValue(name="requests_running", metric="vllm:num_requests_running", value=20.0 if busy else 0.0)]))
    return out


def test_tokens_per_second_and_cost_per_million_output_tokens(tmp_path) -> None:
    recs = _records()
    spool = Spool(tmp_path / "s.db")
    topics = Topics("")
    rows = [(topics.for_record(r), record_key(r), r.ts, encode(r)) for r in batch_task_metrics(recs + recs[:5])]  # 5 sent twice
    spool.append_many(rows)
    u = compute_usage(spool_records(spool, T0, T0 + 7200), since=T0, until=T0 + 7200, price_per_gpu_hour=2.0)
    spool.close()
    (row,) = u.serving
    assert (row.service, row.model, row.gpus) == ("chat", "qwen2-72b", 2)
    assert row.output_tokens == 3_000_000 and row.requests == 50 * 303 and row.failed == 150
    assert row.gpu_hours == pytest.approx(2.0) and row.idle_gpu_hours == pytest.approx(1 / 3)
    assert row.cost_per_mtok == pytest.approx(4 / 3.0)
    assert row.tokens_per_s == pytest.approx(3e6 / 3600) and row.tokens_per_s_per_gpu == pytest.approx(3e6 / 7200)
    table = to_table(u, "USD")
    assert "Inference services" in table and "1.33" in table and "3.0 M" in table
    assert '"cost_per_mtok": 1.3333' in to_json(u)
    assert "inference: 3.0 M output tokens over 1 service(s)" in digest_record(u, "USD").summary


def test_no_price_no_cost_and_no_services_no_table() -> None:
    u = compute_usage(_records(), since=T0, until=T0 + 7200)
    assert u.serving[0].cost_per_mtok is None and "cost per M output tokens" not in to_table(u)
    assert "Inference services" not in to_table(compute_usage([], since=T0, until=T0 + 1))


def test_budget_remaining_on_a_spool_of_a_simulated_serving_run(tmp_path) -> None:
    """``serving-errors`` on two nodes for 100 simulated minutes, spooled: the report's budget per
    node is the inference stage's own (one arithmetic, ``gpuwarden.slo``), the service's is both
    nodes' events together, and it says it saw 1 h 40 min of a 30 d window."""
    from gpuwarden.app.settings import Settings
    from gpuwarden.history.accounting import usage_from_spool
    from gpuwarden.producers.servingsim import SLO, ServingSim
    from gpuwarden.slo import ServiceSlo, service_budgets
    from gpuwarden.streams.config import EngineConfig
    from gpuwarden.streams.inferencestage import InferenceStage

    slos = {"chat-errors": ServiceSlo.model_validate(SLO)}
    stage = InferenceStage(EngineConfig(slo=slos))
    sims = [ServingSim("serving-errors", node=n, boot_id="b", seed=3, start_ts=T0, pid=7, gpus=[0], scrape_s=60.0)
            for n in ("gn1", "gn2")]
    recs = [r for k in range(1, 101) for s in sims if (r := s.scrape(T0 + 60.0 * k, k)) is not None]
    for r in recs:
        stage.process(r)
    stage.flush()
    spool = Spool(tmp_path / "s.db")
    topics = Topics("")
    spool.append_many([(topics.for_record(r), record_key(r), r.ts, encode(r)) for r in recs])
    until = T0 + 6001.0
    # a report over the last 30 min still judges the budget over the SLO window (all 100 min)
    u = usage_from_spool(Settings(), spool, since=until - 1800, until=until, by="user", slos=slos)
    spool.close()
    for view in stage.views():
        # the stage judges at its open minute's start (20 s before the last record) and reads a
        # 30 d window in whole hours, so it has every record: the same events, 20 s less seen
        own = service_budgets([r for r in recs if r.node == view.node], slos, until)
        assert {b.objective: b.remaining for b in own} == pytest.approx(view.budget_remaining, rel=1e-3)
    fleet = {b.objective: b for b in u.budgets}
    assert set(fleet) == {"error_rate", "itl_p99", "ttft_p99"}
    err = fleet["error_rate"]
    per_node = [b.events for n in ("gn1", "gn2") for b in service_budgets([r for r in recs if r.node == n], slos, until)
                if b.objective == "error_rate"]
    assert err.events.total == sum(e.total for e in per_node) and err.events.bad == sum(e.bad for e in per_node)
    assert err.events.bad > 0 and err.remaining < 1 and err.partial
    table = to_table(u)
    assert "Error budgets" in table and "1 h 40 min of 30 d" in table and f"{err.remaining:.1%}" in table
    assert "lowest error budget: chat-errors" in digest_record(u).summary
    assert '"coverage": "over the 1 h 40 min seen of a 30 d window"' in to_json(u)
