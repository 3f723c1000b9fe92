"""Tokens, cost per million tokens and MFU on a designed hour, every figure worked by hand.

T0 = 1_700_000_000; snapshots every 60 s at T0 + 60·k, k = 1..60 (each stands for the minute
before it), so each GPU is held (T0, T0 + 3600]: 1 card-hour. ``--until`` is T0 + 3630, 30 s
past the last snapshot: card-hours, and so tokens, end at the last snapshot (T0 + 3600).

n1: 8 × NVIDIA H200, alice's ``llama13b-pretrain`` (run p1): 13e9 parameters, 40 layers, hidden
    5,120, sequence 4,096. Reports tokens/s every 60 s at T0 + 60·k, k = 0..59: 16,000 for
    k < 30, 17,000 after. Tokens 1,800 × 16,000 + 1,800 × 17,000 = 28.8 M + 30.6 M = 59.4 M
    (its last report, at T0 + 3540, holds 60 s to T0 + 3600: 1.02 M of them).
n2: 4 × NVIDIA GeForce RTX 4090, bob's ``bert-ft`` (run b1): reports 5,000 tokens/s every
    10 min at T0 + 600·k, k = 0..5: 3,600 × 5,000 = 18 M tokens (the last report, at
    T0 + 3000, holds 600 s: 3 M of them). It declares 3.4e8 parameters, but no dense BF16
    peak is known for the 4090: its MFU is unknown.

At $3.10 per GPU-hour: alice 8 × 3.10 = $24.80 for 59.4 M tokens = $0.417508 per million;
bob 4 × 3.10 = $12.40 for 18 M = $0.688889 per million.
"""

from __future__ import annotations

import json

import pytest

from gpuwarden.contract import TaskMetricKind
from gpuwarden.history.accounting import compute_usage, to_csv, to_json, to_table
from tests.history.builders import gpu, metric, proc, snap

T0 = 1_700_000_000.0
PRICE = 3.10
H200, RTX = "NVIDIA H200", "NVIDIA GeForce RTX 4090"


def designed_hour(last_snapshot_k: int = 60) -> list:
    recs: list = []
    for k in range(1, last_snapshot_k + 1):
        ts = T0 + 60 * k
        recs.append(snap("n1", ts, k, [gpu(g, 97, name=H200) for g in range(8)],
                         [proc(g, "alice", "llama13b-pretrain", "p1", "fm") for g in range(8)], interval_s=60))
        recs.append(snap("n2", ts, k, [gpu(g, 90, name=RTX) for g in range(4)],
                         [proc(g, "bob", "bert-ft", "b1", "nlp") for g in range(4)], interval_s=60))
    recs.append(metric("n1", T0, "llama13b-pretrain", "p1", TaskMetricKind.MODEL, model_params=13e9,
                       model_layers=40, model_hidden=5120, model_seq_len=4096))
    recs += [metric("n1", T0 + 60 * k, "llama13b-pretrain", "p1", TaskMetricKind.THROUGHPUT,
                    throughput=16_000.0 if k < 30 else 17_000.0, throughput_unit="tokens/s") for k in range(60)]
    recs.append(metric("n2", T0, "bert-ft", "b1", TaskMetricKind.MODEL, model_params=3.4e8))
    recs += [metric("n2", T0 + 600 * k, "bert-ft", "b1", TaskMetricKind.THROUGHPUT, throughput=5_000.0,
                    throughput_unit="tokens/s") for k in range(6)]
    return recs


def rows(recs: list, until: float) -> dict:
    return {r.key: r for r in compute_usage(recs, since=T0, until=until, price_per_gpu_hour=PRICE).rows}


def test_tokens_run_to_the_end_of_the_span_the_card_hours_cover() -> None:
    r = rows(designed_hour(), T0 + 3630)
    alice, bob = r["alice"], r["bob"]
    assert alice.card_hours == pytest.approx(8.0) and bob.card_hours == pytest.approx(4.0)
    assert alice.tokens == pytest.approx(59.4e6)  # today's code: 58.38 M (the last minute lost)
    assert bob.tokens == pytest.approx(18e6)  # today's code: 15 M (the last 10 min lost)
    assert alice.cost_per_mtok == pytest.approx(24.80 / 59.4)
    assert round(alice.cost_per_mtok, 4) == 0.4175
    assert bob.cost_per_mtok == pytest.approx(12.40 / 18)
    assert round(bob.cost_per_mtok, 4) == 0.6889


def test_mfu_of_the_designed_hour_by_hand() -> None:
    """FLOPs per trained token 6 × 13e9 = 7.8e10, plus attention 12 × 40 × 5,120 × 4,096 =
    1.00663296e10: 8.80663296e10. The tokens needed 59.4e6 × 8.80663296e10 = 5.23114e18 FLOPs;
    8 H200 (989 TFLOPS dense BF16) could do 8 × 3,600 × 989e12 = 2.84832e19: MFU 18.37 %."""
    alice = rows(designed_hour(), T0 + 3630)["alice"]
    per_token = 6 * 13e9 + 12 * 40 * 5120 * 4096
    assert per_token == 8.80663296e10
    assert alice.mfu == pytest.approx(59.4e6 * per_token / (8 * 3600 * 989e12), rel=1e-9)
    assert round(alice.mfu, 4) == 0.1837


def test_a_window_ending_mid_run_cuts_tokens_where_it_cuts_card_hours() -> None:
    """``--until`` T0 + 1530: the snapshots up to T0 + 1500 count (25 min per GPU). Alice's
    reports up to T0 + 1500, all 16,000/s: 1,500 × 16,000 = 24 M. Bob's at T0, +600, +1200,
    the last holding to T0 + 1500: 1,500 × 5,000 = 7.5 M (today's code: 6 M)."""
    r = rows(designed_hour(), T0 + 1530)
    assert r["alice"].card_hours == pytest.approx(8 * 25 / 60) and r["alice"].tokens == pytest.approx(24e6)
    assert r["bob"].card_hours == pytest.approx(4 * 25 / 60) and r["bob"].tokens == pytest.approx(7.5e6)
    assert r["bob"].cost_per_mtok == pytest.approx(4 * 25 / 60 * PRICE / 7.5)


def test_a_run_that_reported_its_exit_counts_no_tokens_after_it() -> None:
    """Bob's run says it exited at T0 + 3300 though its process still shows until T0 + 3600:
    its last rate holds from T0 + 3000 to the exit, 300 s: 15 M + 1.5 M = 16.5 M tokens."""
    recs = designed_hour() + [metric("n2", T0 + 3300, "bert-ft", "b1", TaskMetricKind.EXIT, exit_code=0)]
    assert rows(recs, T0 + 3630)["bob"].tokens == pytest.approx(16.5e6)


def test_json_carries_the_figures() -> None:
    doc = json.loads(to_json(compute_usage(designed_hour(), since=T0, until=T0 + 3630, price_per_gpu_hour=PRICE)))
    alice = next(r for r in doc["rows"] if r["key"] == "alice")
    assert alice["tokens"] == pytest.approx(59.4e6) and alice["cost_per_mtok"] == pytest.approx(24.80 / 59.4)


def test_the_fleet_mfu_says_which_card_hours_it_covers() -> None:
    """Bob's 4090s have no known peak: the fleet's MFU is alice's, over her 8 of the fleet's 12
    card-hours (8 H200 + 4 RTX 4090 for an hour), and the total row says so."""
    u = compute_usage(designed_hour(), since=T0, until=T0 + 3630, price_per_gpu_hour=PRICE)
    total = u.total
    assert total.card_hours == pytest.approx(12.0) and total.mfu_card_hours == pytest.approx(8.0)
    assert total.mfu == pytest.approx(59.4e6 * (6 * 13e9 + 12 * 40 * 5120 * 4096) / (8 * 3600 * 989e12))
    table = to_table(u)
    lines = table.splitlines()
    (total_line,) = [line for line in lines if line.startswith("│ total")]
    assert total_line.endswith("18.4 %* │")
    assert "* total: 18.4 % (of 8 of 12 card-hours)" in lines
    assert "MFU unknown on GPUs without a known dense BF16 peak: NVIDIA GeForce RTX 4090" in lines
    (alice_line,) = [line for line in lines if line.startswith("│ alice")]
    assert alice_line.endswith("18.4 % │")  # all of her card-hours: no mark, no note
    assert not any(line.startswith("* alice") for line in lines)
    (bob_line,) = [line for line in lines if line.startswith("│ bob")]
    assert bob_line.endswith("unknown │")


def test_json_mfu_is_a_number_or_null_beside_the_card_hours_it_covers() -> None:
    doc = json.loads(to_json(compute_usage(designed_hour(), since=T0, until=T0 + 3630, price_per_gpu_hour=PRICE)))
    by = {r["key"]: r for r in doc["rows"]}
    assert by["bob"]["mfu"] is None and by["bob"]["unknown_gpus"] == [RTX] and by["bob"]["mfu_card_hours"] == 0.0
    assert isinstance(by["alice"]["mfu"], float) and by["alice"]["mfu_card_hours"] == pytest.approx(8.0)
    total = doc["total"]
    assert list(total).index("mfu_card_hours") == list(total).index("card_hours") + 1
    assert (total["card_hours"], total["mfu_card_hours"]) == (pytest.approx(12.0), pytest.approx(8.0))
    assert round(total["mfu"], 4) == 0.1837
    csv_header = to_csv(compute_usage(designed_hour(), since=T0, until=T0 + 3630)).splitlines()[0].split(",")
    assert csv_header[-2:] == ["mfu", "mfu_card_hours"]


def serving_hour(**model: object) -> list:
    """2 × NVIDIA H200 NVL serving carol's ``chat-13b`` (run s1) for the hour, 3,000 output tokens/s
    reported every 60 s: 3,600 × 3,000 = 10.8 M tokens."""
    recs: list = [snap("n3", T0 + 60 * k, k, [gpu(g, 60, name="NVIDIA H200 NVL") for g in range(2)],
                       [proc(g, "carol", "chat-13b", "s1", "apps") for g in range(2)], interval_s=60)
                  for k in range(1, 61)]
    recs.append(metric("n3", T0, "chat-13b", "s1", TaskMetricKind.MODEL, model_params=13e9, model_layers=40,
                       model_hidden=5120, model_seq_len=4096, **model))
    recs += [metric("n3", T0 + 60 * k, "chat-13b", "s1", TaskMetricKind.THROUGHPUT, throughput=3_000.0,
                    throughput_unit="tokens/s") for k in range(60)]
    return recs


def test_a_serving_task_is_credited_a_forward_pass_on_its_own_peak() -> None:
    """Serving FLOPs per token 2 × 13e9 + 4 × 40 × 5,120 × 4,096 = 2.93554432e10; the tokens needed
    10.8e6 × 2.93554432e10 = 3.17039e17; 2 H200 NVL (835 TFLOPS dense BF16) could do 2 × 3,600 ×
    835e12 = 6.012e18: MFU 5.27 %. The old code credited training FLOPs (8.80663296e10) against
    the SXM peak (989): 13.36 %."""
    carol = compute_usage(serving_hour(model_mode="serve"), since=T0, until=T0 + 3630).rows[0]
    assert carol.tokens == pytest.approx(10.8e6)
    assert carol.mfu == pytest.approx(10.8e6 * (2 * 13e9 + 4 * 40 * 5120 * 4096) / (2 * 3600 * 835e12), rel=1e-9)
    assert round(carol.mfu, 4) == 0.0527


def test_a_task_that_reports_serving_figures_is_taken_as_serving_unless_it_says_otherwise() -> None:
    ttft = [metric("n3", T0 + 30, "chat-13b", "s1", TaskMetricKind.TTFT, ttft_s=0.2)]
    serving = 10.8e6 * (2 * 13e9 + 4 * 40 * 5120 * 4096) / (2 * 3600 * 835e12)
    training = 10.8e6 * (6 * 13e9 + 12 * 40 * 5120 * 4096) / (2 * 3600 * 835e12)
    assert compute_usage(serving_hour() + ttft, since=T0, until=T0 + 3630).rows[0].mfu == pytest.approx(serving)
    assert compute_usage(serving_hour(), since=T0, until=T0 + 3630).rows[0].mfu == pytest.approx(training)
    said = compute_usage(serving_hour(model_mode="train") + ttft, since=T0, until=T0 + 3630).rows[0]
    assert said.mfu == pytest.approx(training)
