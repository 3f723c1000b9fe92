"""Replay: a recorded live run replays to exactly its transitions, from a file, the spool and Kafka."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import yaml

from gpuwarden.contract import decode, encode
from gpuwarden.kafka import produce_records
from gpuwarden.streams.compare import compare, replay_both
from gpuwarden.streams.engine import Engine
from gpuwarden.history.sources import (
    INPUT_KINDS,
    KafkaReadStats,
    ReplayError,
    input_topics,
    read_file,
    read_kafka,
    time_range,
)
from gpuwarden.streams.rules import load_rules
from gpuwarden.units import parse_time
from tests.history.builders import REPO, config, gw
from tests.kafka_support import create_topic, unique_topic

DEFAULT_RULES = REPO / "streams" / "default_rules.yaml"


def test_replay_of_a_recorded_run_gives_exactly_the_live_transitions(recorded):
    r = gw("replay", "--config", recorded["cfg"], "--from-file", str(recorded["file"]), "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == recorded["live"]


def test_a_simulation_replays_with_its_services_judged_as_live(tmp_path):
    """From this start the live run fires inference-batch-full, judged against the simulated
    server's max batch: the replay of its recording must judge it the same (it once did not)."""
    from tests.history.conftest import BATCH_FULL_START
    cfg, rec = config(tmp_path), tmp_path / "run.jsonl"
    live = gw("run", "--config", cfg, "--simulate", "mixed", "--nodes", "2", "--gpus", "4", "--duration", "1h",
              "--start", str(BATCH_FULL_START), "--json", "--record", str(rec))
    assert live.returncode == 0, live.stderr
    assert "inference-batch-full" in {json.loads(x)["rule"] for x in live.stdout.splitlines()}
    replay = gw("replay", "--config", cfg, "--from-file", str(rec), "--json")
    assert replay.stdout.splitlines() == live.stdout.splitlines()
    spooled = gw("replay", "--config", cfg, "--spool", str(tmp_path / "spool"), "--json")
    assert spooled.stdout.splitlines() == live.stdout.splitlines()


def test_replay_from_the_spool_of_that_run(recorded):
    spool_dir = recorded["tmp"] / "spool"
    r = gw("replay", "--config", recorded["cfg"], "--spool", str(spool_dir), "--json")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == recorded["live"]


def test_file_time_range_and_bad_lines(recorded, tmp_path):
    records = list(read_file(recorded["file"]))
    mid = records[len(records) // 2].ts
    damaged = tmp_path / "damaged.jsonl"
    lines = recorded["file"].read_bytes().splitlines(keepends=True)
    damaged.write_bytes(b"".join(lines[:10]) + b'{"schema":"node_snapshot/2","ts":"soon"}\nnot json\n'
                        + b"".join(lines[10:]))
    rejected: list[tuple[str, str]] = []
    got = list(read_file(damaged, since=mid, on_reject=lambda w, why: rejected.append((w, why))))
    assert got == [r for r in records if r.ts >= mid]
    assert [w.rsplit(":", 1)[1] for w, _ in rejected] == ["11", "12"]
    assert "ts" in rejected[0][1]
    # The CLI goes on past them, and says so.
    r = gw("replay", "--config", recorded["cfg"], "--from-file", str(damaged), "--json")
    assert r.returncode == 0 and r.stdout.splitlines() == recorded["live"]
    assert "2 records skipped" in r.stderr


def test_time_parsing():
    now = 1_800_000_000.0
    assert parse_time("2h", now) == now - 7200
    assert parse_time("7d ago", now) == now - 7 * 86400
    assert parse_time("1746100800", now) == 1746100800.0
    assert parse_time("2025-05-01T12:00:00Z", now) == 1746100800.0
    assert parse_time("2025-05-01T14:00:00+02:00", now) == 1746100800.0
    assert parse_time("2025-05-01T12:00:00", now) == 1746100800.0  # no offset: UTC
    with pytest.raises(ValueError, match="expected a time"):
        parse_time("yesterday", now)
    with pytest.raises(ReplayError, match="expected a time"):
        time_range("yesterday", None, now)
    with pytest.raises(ReplayError, match="must be after"):
        time_range("1h", "2h", now)


def test_comparison_of_two_rule_sets(recorded, tmp_path):
    """B drops power-brake (lost), adds a warm-GPU rule (gained), fires data-loader-starvation sooner."""
    default = yaml.safe_load(DEFAULT_RULES.read_text())
    starve = next(r for r in default["rules"] if r["name"] == "data-loader-starvation")
    assert starve["for"] == "3m"
    b = tmp_path / "b.yaml"
    b.write_text(yaml.safe_dump({"version": 1, "extends": "default", "disable": ["power-brake"], "rules": [
        {**starve, "for": "1m"},
        {"name": "warm-gpu", "scope": "gpu", "tier": "info", "for": "1m", "summary": "warm {node} {gpu}",
         "when": {"threshold": {"metric": "temp_gpu_c", "op": ">=", "value": 80}}},
    ]}))
    r = gw("replay", "--config", recorded["cfg"], "--from-file", str(recorded["file"]), "--json",
           "--rules", str(DEFAULT_RULES), "--rules", str(b))
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert {d["rule"] for d in c["lost"]} == {"power-brake"}
    assert {d["rule"] for d in c["gained"]} == {"warm-gpu"}
    starve_pairs = [p for p in c["both"] if p["rule"] == "data-loader-starvation"]
    assert starve_pairs and all(p["delay_s"] == pytest.approx(-120, abs=60) for p in starve_pairs)
    assert all(p["delay_s"] == 0 for p in c["both"] if p["rule"] != "data-loader-starvation")
    # The same file twice: nothing gained, nothing lost, no delay.
    records = list(read_file(recorded["file"]))
    same, a_tr, b_tr = replay_both(records, Engine(load_rules(None)), Engine(load_rules(None)))
    assert a_tr == b_tr and not same.gained and not same.lost and len(same.both) >= 4
    assert "gained by B: 0   lost by B: 0" in same.to_text()
    assert re.search(r"\+0 s\s+power-brake ", same.to_text())
    assert compare(a_tr, []).lost == compare([], a_tr).gained


def _kafka_order(records: list) -> list:
    """How a Kafka replay orders records: event time, then topic (one partition each, so offsets)."""
    rank = {kind: i for i, kind in enumerate(INPUT_KINDS)}
    return sorted(records, key=lambda r: (r.ts, rank[type(r)]))


@pytest.mark.kafka
def test_replay_from_kafka_by_time_range(recorded, kafka_bootstrap, tmp_path):
    prefix = unique_topic("replay") + "."
    records = list(read_file(recorded["file"]))

    async def publish() -> None:
        for t in input_topics(prefix):  # kept: stamped at START, a fixed day, past a 24 h retention from the next day on
            await create_topic(kafka_bootstrap, t, partitions=1, config={"retention.ms": "-1"})
        await produce_records(records, {"bootstrap_servers": kafka_bootstrap}, prefix, partitions=1, event_time=True)

    asyncio.run(publish())
    since, until = records[0].ts + 1200, records[0].ts + 3000
    stats = KafkaReadStats()
    got = asyncio.run(read_kafka({"bootstrap_servers": kafka_bootstrap}, input_topics(prefix), since, until,
                                 slack_s=60, stats=stats))
    expected = _kafka_order([r for r in records if since <= r.ts < until])
    assert got == expected
    # offsets_for_times skipped the first ~20 minutes instead of reading and dropping them.
    skipped = sum(r.ts < since - 60 for r in records)
    assert skipped > 0 and len(expected) == stats.in_range <= stats.fetched <= len(records) - skipped

    r = gw("replay", "--config", config(tmp_path, prefix), "--kafka", kafka_bootstrap, "--json",
           "--since", str(since), "--until", str(until))
    assert r.returncode == 0, r.stderr
    engine = Engine()
    want = [encode(t).decode() for t in engine.process_many(expected) + engine.flush()]
    assert want and r.stdout.splitlines() == want
    assert all(since <= decode(x).ts for x in r.stdout.splitlines())


def test_replay_of_a_spool_written_under_another_topic_prefix_says_which(tmp_path):
    """Zero transitions and zero skipped records said nothing: the spool held lab1.* topics."""
    from gpuwarden.spool import Spool

    spool_file = tmp_path / "spool.db"
    with Spool(spool_file) as spool:
        spool.append("lab1.gpu.samples", b"{}", key="n1", ts=1.0)
    r = gw("replay", "--config", config(tmp_path / "cfg"), "--spool", str(spool_file))
    assert r.returncode == 2
    assert "holds no records under topic prefix ''" in r.stderr
    assert "lab1.gpu.samples: 1 under prefix 'lab1.'" in r.stderr and "kafka.topic_prefix: 'lab1.'" in r.stderr
