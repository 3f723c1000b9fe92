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
