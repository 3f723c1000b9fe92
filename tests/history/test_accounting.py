"""Accounting against a scenario computed by hand.

T0 = 1_700_000_000. Two nodes.

n1: interval_s = 600 (10 min = 1/6 h), snapshots at T0 + k*600, k = 0..5 (6 snapshots).
  GPU0  alice (llm, a1, p1)  util 80 throughout          → 6/6 h = 1.0 h held, 0 idle
  GPU1  bob (vision, b1, p2) util 2 for k=0..2, 50 after → 1.0 h held, 0.5 h idle
  GPU2  alice a1 AND bob b1, util 3, only k=0..2         → 0.5 h held, all idle,
        split between the two owners                    → 0.25 h each (idle too)
  GPU3  no process (util 0)                              → not held, nothing counted
  plus one snapshot at T0-600 (before --since)           → excluded
n2: no interval_s, snapshots at T0, +300, +600, +900, +3600 → gaps 300,300,300,2700,
  median 300 s, so each snapshot counts 300 s = 1/12 h (the 45-min outage is not billed).
  GPU0  carol (llm, c1, p1) util None at the first 3 (unknown → never idle), 1 at the last 2
        → 5/12 h held, 2/12 = 1/6 h idle
  GPU1  alice (llm, a2, p1) only at T0+3600, util 90      → 1/12 h held

By user:  alice 1.0 + 0.25 + 1/12 = 4/3 h, idle 0.25
          bob   1.0 + 0.25       = 1.25 h, idle 0.5 + 0.25 = 0.75
          carol 5/12 h,                   idle 1/6
          total 3.0 h held, 7/6 h idle; at 2.0 per GPU-hour: 8/3, 2.5, 5/6, total 6.0
Failures: a1 exits 1 at T0+3000 (alice), b1 OOMs at T0+1500 (bob), c1 exits 0 (not a failure).
Reruns:   llm: a1 failed at T0+3000, a2 first seen at T0+3600 → 1 rerun (alice).
          c1 started at T0, before the failure → not a rerun.  vision: nothing restarted.
By task-class: llm 1.0 + 0.25 + 5/12 + 1/12 = 1.75 h, idle 0.25 + 1/6 = 5/12
               vision 1.0 + 0.25 = 1.25 h, idle 0.75
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from gpuwarden.app.usage import digest_notification
from gpuwarden.history.accounting import compute_usage, to_csv, to_json
from gpuwarden.contract import TaskMetricKind, Topics, batch_task_metrics, encode
from gpuwarden.spool import Spool
from tests.fakes.http import FakeSlack
from tests.history.builders import config, gpu, gw, metric, proc, snap

T0 = 1_700_000_000.0
SINCE, UNTIL = T0, T0 + 4000


def scenario() -> list:
    recs = []
    a1 = lambda g: proc(g, "alice", "llm", "a1", "p1")  # noqa: E731
    b1 = lambda g: proc(g, "bob", "vision", "b1", "p2")  # noqa: E731
    recs.append(snap("n1", T0 - 600, 0, [gpu(0, 80)], [a1(0)], interval_s=600))
    for k in range(6):
        early = k <= 2
        gpus = [gpu(0, 80), gpu(1, 2 if early else 50), gpu(2, 3), gpu(3, 0)]
        procs = [a1(0), b1(1)] + ([a1(2), b1(2)] if early else [])
        recs.append(snap("n1", T0 + k * 600, k + 1, gpus, procs, interval_s=600))
    c1 = proc(0, "carol", "llm", "c1", "p1")
    for i, off in enumerate([0, 300, 600, 900, 3600]):
        util = None if i < 3 else 1
        gpus = [gpu(0, util), gpu(1, 90)]
        procs = [c1] + ([proc(1, "alice", "llm", "a2", "p1")] if off == 3600 else [])
        recs.append(snap("n2", T0 + off, i, gpus, procs))
    recs += [
        metric("n1", T0 + 1500, "vision", "b1", TaskMetricKind.OOM),
        metric("n1", T0 + 3000, "llm", "a1", TaskMetricKind.EXIT, exit_code=1),
        metric("n2", T0 + 3500, "llm", "c1", TaskMetricKind.EXIT, exit_code=0),
    ]
    return recs


def rows(usage) -> dict:
    return {r.key: r for r in usage.rows}


def test_by_user_matches_hand_computation():
    u = compute_usage(scenario(), by="user", since=SINCE, until=UNTIL, price_per_gpu_hour=2.0)
    r = rows(u)
    assert set(r) == {"alice", "bob", "carol"}
    assert r["alice"].card_hours == pytest.approx(4 / 3)
    assert r["alice"].idle_card_hours == pytest.approx(0.25)
    assert r["bob"].card_hours == pytest.approx(1.25)
    assert r["bob"].idle_card_hours == pytest.approx(0.75)
    assert r["carol"].card_hours == pytest.approx(5 / 12)
    assert r["carol"].idle_card_hours == pytest.approx(1 / 6)
    assert (r["alice"].failed_jobs, r["bob"].failed_jobs, r["carol"].failed_jobs) == (1, 1, 0)
    assert (r["alice"].reruns, r["bob"].reruns, r["carol"].reruns) == (1, 0, 0)
    assert r["alice"].cost == pytest.approx(8 / 3)
    assert r["carol"].idle_cost == pytest.approx(1 / 3)
    total = u.total
    assert total.card_hours == pytest.approx(3.0)
    assert total.idle_card_hours == pytest.approx(7 / 6)
    assert total.cost == pytest.approx(6.0)
    assert [x.key for x in u.rows] == ["alice", "bob", "carol"]  # most card-hours first


def test_by_task_class_and_project():
    r = rows(compute_usage(scenario(), by="task-class", since=SINCE, until=UNTIL))
    assert r["llm"].card_hours == pytest.approx(1.75)
    assert r["llm"].idle_card_hours == pytest.approx(5 / 12)
    assert r["vision"].card_hours == pytest.approx(1.25)
    assert (r["llm"].failed_jobs, r["llm"].reruns, r["vision"].failed_jobs) == (1, 1, 1)
    assert r["llm"].cost is None  # no price, no cost
    p = rows(compute_usage(scenario(), by="project", since=SINCE, until=UNTIL))
    assert p["p1"].card_hours == pytest.approx(1.75) and p["p2"].card_hours == pytest.approx(1.25)


def test_idle_threshold_is_configurable():
    # At 60 %, bob's GPU1 at 50 % counts idle too: bob idle = 0.75 + 0.5 = 1.25 (all of it).
    r = rows(compute_usage(scenario(), by="user", since=SINCE, until=UNTIL, idle_util_below=60))
    assert r["bob"].idle_card_hours == pytest.approx(1.25)
    assert r["alice"].idle_card_hours == pytest.approx(0.25)


def test_csv_has_every_row_and_the_total():
    u = compute_usage(scenario(), by="user", since=SINCE, until=UNTIL, price_per_gpu_hour=2.0)
    got = list(csv.DictReader(io.StringIO(to_csv(u))))
    assert [g["user"] for g in got] == ["alice", "bob", "carol", "total"]
    assert float(got[-1]["cost"]) == pytest.approx(6.0)


def test_digest_carries_the_table():
    u = compute_usage(scenario(), by="user", since=SINCE, until=UNTIL, price_per_gpu_hour=2.0)
    n = digest_notification(u, "team-chat", "EUR")
    assert n.receiver == "team-chat" and len(n.alerts) == 1
    note = n.alerts[0].evidence.note
    assert "alice" in note and "carol" in note and "6.00" in note
    assert "3.0 card-hours" in n.alerts[0].summary


def test_cli_report_from_the_spool(tmp_path):
    db = tmp_path / "spool.db"
    topics = Topics()
    with Spool(db) as spool:
        spool.append_many((topics.for_record(r), None, r.ts, encode(r)) for r in batch_task_metrics(scenario()))
    cfg = config(tmp_path, spool=db, extra="accounting:\n  price_per_gpu_hour: 2.0\n")
    base = ["report", "--config", cfg, "usage", "--since", str(SINCE), "--until", str(UNTIL)]
    out = gw(*base, "--format", "json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["total"]["card_hours"] == pytest.approx(3.0)
    assert data["total"]["cost"] == pytest.approx(6.0)
    table = gw(*base)
    assert table.returncode == 0, table.stderr
    assert "alice" in table.stdout and "1.33" in table.stdout and "6.00" in table.stdout


def test_weekly_digest_posts_the_table_to_the_chat_receiver(tmp_path):
    """`report usage --post` → Delivery → a real HTTP server standing in for a Slack webhook."""
    db = tmp_path / "spool.db"
    with Spool(db) as spool:
        spool.append_many((Topics().for_record(r), None, r.ts, encode(r)) for r in batch_task_metrics(scenario()))
    with FakeSlack() as slack:
        extra = ("notify:\n  receivers:\n    - name: team-chat\n      slack:\n        url: {env: USAGE_SLACK_URL}\n"
                 "accounting:\n  digest_receiver: team-chat\n  price_per_gpu_hour: 2.0\n  currency: EUR\n")
        cfg = config(tmp_path, spool=db, extra=extra)
        r = gw("report", "--config", cfg, "usage", "--post", "--until", str(UNTIL),
               env={"USAGE_SLACK_URL": slack.base + slack.path})
        assert r.returncode == 0, r.stderr
        assert "delivered" in r.stderr
        assert len(slack.accepted) == 1
        text = json.dumps(slack.accepted[0].json)
    # The week before UNTIL also holds the T0-600 snapshot (alice, 600 s = 1/6 h):
    # total 3.0 + 1/6 = 3.17 card-hours, cost 2.0 x 19/6 = 6.33, alice 1.5 h.
    for expected in ("alice", "bob", "carol", "3.2 card-hours", "6.33", "1.50"):
        assert expected in text
    assert slack.path not in r.stderr  # the webhook URL is a secret


def test_overlapping_histories_in_one_spool_count_each_moment_once():
    """Issue #19: two demo runs into one spool gave 167.87 card-hours for 16 GPUs over ~6 h. The
    same simulated fleet twice, the second run 1 s later (its records between the first's), and
    every record of the first again (redelivered): the card-hours of one run, not three."""
    from gpuwarden.producers.simulator import Simulator

    def run(start: float) -> list:
        return list(Simulator("mixed", nodes=2, gpus=8, seed=1, start_ts=start, tick_s=5.0).run(2 * 3600))

    one = run(1_700_000_000.0)
    window = {"since": 1_699_990_000.0, "until": 1_700_010_000.0}
    alone = compute_usage(one, **window).total.card_hours
    merged = compute_usage([*one, *run(1_700_000_001.0), *one], **window).total.card_hours
    assert alone > 20
    assert merged == pytest.approx(alone, rel=0.01)


def _llm_hour(gpu_name: str, **model: object) -> list:
    """8 GPUs of ``gpu_name`` held by one 7B-parameter run for an hour (60 snapshots of 60 s),
    reporting 20,000 tokens/s at the start and the end."""
    recs = [snap("n9", T0 + 60 * k, k, [gpu(g, 95, name=gpu_name) for g in range(8)],
                 [proc(g, "chen", "llama-7b", "run-1", "fm") for g in range(8)], interval_s=60)
            for k in range(1, 61)]
    recs += [metric("n9", T0, "llama-7b", "run-1", TaskMetricKind.MODEL, model_params=7e9, **model),
             metric("n9", T0, "llama-7b", "run-1", TaskMetricKind.THROUGHPUT, throughput=20_000.0,
                    throughput_unit="tokens/s"),
             metric("n9", T0 + 3600, "llama-7b", "run-1", TaskMetricKind.THROUGHPUT, throughput=20_000.0,
                    throughput_unit="tokens/s")]
    return recs


def test_cost_per_million_tokens_and_mfu_as_worked_by_hand():
    """Worked on paper: 8 GPU-hours at $2 = $16 for 20,000 tokens/s x 3,600 s = 72 M tokens:
    $0.2222 per million. FLOPs per token 6 x 7e9 = 4.2e10; the tokens needed 72e6 x 4.2e10 =
    3.024e18 FLOPs; 8 H100 SXM (989 TFLOPS dense BF16) could do 8 x 3,600 x 989e12 = 2.848e19:
    MFU 10.62 %. With the shape (32 layers, hidden 4,096, sequence 4,096) the attention term adds
    12 x 32 x 4,096 x 4,096 = 6.442e9 FLOPs per token: MFU 12.25 %."""
    u = compute_usage(_llm_hour("NVIDIA H100 80GB HBM3"), since=T0, until=T0 + 4000, price_per_gpu_hour=2.0)
    (row,) = u.rows
    assert row.card_hours == pytest.approx(8.0) and row.tokens == pytest.approx(72e6)
    assert row.cost_per_mtok == pytest.approx(16 / 72, rel=1e-9)
    assert row.mfu == pytest.approx(3.024e18 / 2.848320e19, rel=1e-9)
    assert round(row.mfu, 4) == 0.1062
    shaped = compute_usage(_llm_hour("NVIDIA H100 80GB HBM3", model_layers=32, model_hidden=4096,
                                     model_seq_len=4096), since=T0, until=T0 + 4000).rows[0]
    assert round(shaped.mfu, 4) == round(72e6 * (4.2e10 + 12 * 32 * 4096 * 4096) / 2.848320e19, 4) == 0.1225


def test_mfu_on_a_gpu_model_without_a_known_peak_is_unknown():
    u = compute_usage(_llm_hour("NVIDIA GeForce RTX 4090"), since=T0, until=T0 + 4000, price_per_gpu_hour=2.0)
    doc = json.loads(to_json(u))
    assert doc["rows"][0]["mfu"] is None and doc["rows"][0]["unknown_gpus"] == ["NVIDIA GeForce RTX 4090"]
    assert doc["rows"][0]["cost_per_mtok"] == pytest.approx(16 / 72)  # the cost needs no peak
