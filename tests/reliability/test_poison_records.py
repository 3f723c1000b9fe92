"""Records no worker may stop on, on a real broker: two `gpuwarden streams` workers, a simulated
fleet, and between its records the inputs that once stopped or fooled the workers.

- a 900 kB truncated JSON record (under ``limits.max_record_bytes``): its dead letter, base64,
  was over the broker's 1 MB default and the refused send crashed both workers, in a loop;
- a 5 MB record (over the limit): kept in its letter as a prefix, its length and SHA-256;
- a snapshot dated 1970 (a node booted before NTP) and one dated 2300: dead-lettered;
- a snapshot of an unknown major version (``node_snapshot/3``): dead-lettered, saying so;
- a snapshot carrying a field this version does not know (a newer agent): read, and counted.

The workers must stay up and the alerts topic must hold exactly the in-process Engine's
transitions over the valid records.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import time
from pathlib import Path

import pytest

from gpuwarden.contract import NodeSnapshot, Topics, encode
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.statewire import app_id
from tests.kafka_support import consume_all, create_topic, produce
from tests.streams_kafka.records import settings_for, snapshot, transition_ids
from tests.streams_kafka.test_failover import produce_records
from tests.streams_kafka.workers import read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 2
SPAN_S = 3600.0


def noise(n: int, seed: int) -> bytes:
    """``n`` bytes of base64 text that compress about as badly as real telemetry can."""
    return base64.b64encode(random.Random(seed).randbytes(n * 3 // 4))[:n]


def truncated(node: str, n: int = 900_000) -> bytes:
    return b'{"schema":"node_snapshot/2","node":"' + node.encode() + b'","pad":"' + noise(n, 1)


def pills(node: str, now: float) -> dict[str, bytes]:
    """Each bad input by name, all keyed to a real node of the run."""
    year_2300 = 10_413_792_000.0
    newer = json.loads(encode(snapshot(node, 10**6, now - 120)))
    newer["schema"] = "node_snapshot/3"
    return {
        "truncated 900 kB": truncated(node),
        "5 MB": b'{"schema":"node_snapshot/2","pad":"' + noise(5 << 20, 2) + b'"}',
        "1970": encode(snapshot(node, 10**6 + 1, 86415.0)),
        "2300": encode(snapshot(node, 10**6 + 2, year_2300)),
        "unknown major": json.dumps(newer).encode(),
    }


WHY = {
    "truncated 900 kB": "Invalid JSON",
    "5 MB": "exceeds the limit of 1048576 bytes",
    "1970": "s in the past (allowed 604800 s, limits.max_past_skew)",
    "2300": "s in the future",
    "unknown major": "'node_snapshot/3' is a version this reader does not know",
}


def with_unknown_field(snap: NodeSnapshot) -> bytes:
    doc = json.loads(encode(snap))
    doc["gpus"]["hbm_temp_c"] = [40.0] * len(snap.gpus)
    doc["rack"] = "r7"
    return json.dumps(doc).encode()


async def test_poison_records_are_dead_lettered_bounded_and_the_workers_carry_on(
    kafka_bootstrap: str, tmp_path: Path, reliability_report
) -> None:
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS, allowed_lateness="30m",
                            summary_lateness="2h")
    topics = Topics(settings.kafka.topic_prefix)
    await create_topic(kafka_bootstrap, topics.samples, partitions=PARTITIONS,
                       config={"max.message.bytes": str(8 << 20)})  # a broker that takes the 5 MB record
    for t in (topics.events, topics.metrics):
        await create_topic(kafka_bootstrap, t, partitions=PARTITIONS)
    now = time.time()
    sim = Simulator(["mixed"], nodes=2, gpus=4, seed=11, start_ts=now - SPAN_S - 600, tick_s=10.0, onset_s=900.0)
    records = list(sim.run(SPAN_S))
    expected = set(transition_ids([encode(t) for t in Engine(config=settings.engine).process_many(records)]))
    assert len(expected) >= 3, expected
    half = len(records) // 2
    odd = next(r for r in records[half:] if isinstance(r, NodeSnapshot))
    bad = pills(odd.node, now)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)

    with workers(config, tmp_path, "w1", "w2") as (w1, w2):
        await produce_records(kafka_bootstrap, topics, records[:half], PARTITIONS)
        await produce(kafka_bootstrap, topics.samples, [(odd.node.encode(), v) for v in bad.values()],
                      max_request_size=8 << 20)
        rest = records[half:]
        at = rest.index(odd)
        await produce_records(kafka_bootstrap, topics, rest[:at], PARTITIONS)
        await produce(kafka_bootstrap, topics.samples, [(odd.node.encode(), with_unknown_field(odd))])
        await produce_records(kafka_bootstrap, topics, rest[at + 1:], PARTITIONS)
        dlq = await consume_all(kafka_bootstrap, Topics.dlq(topics.samples), expected=len(bad))

        async def alerts() -> list[tuple[str, str, float]]:
            return transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])

        async def all_alerts() -> bool:
            return expected <= set(await alerts())

        await wait_for(all_alerts, "every expected transition", poll=2)
        counted = f"unknown {topics.samples} gpus.hbm_temp_c="

        async def reported() -> bool:  # at the next checkpoint (engine.checkpoint_interval)
            return counted in w1.log.read_text() + w2.log.read_text()

        await wait_for(reported, "the count of unknown fields in a worker's log")
        got = set(await alerts())
        assert w1.alive() and w2.alive(), w1.tail() + "\n----\n" + w2.tail()
        logs = w1.log.read_text() + w2.log.read_text()

    assert got == expected, (sorted(expected - got)[:5], sorted(got - expected)[:5])
    letters = [json.loads(r.value) for r in dlq]
    assert len(letters) == len(bad)  # the unknown-field record is not among them
    by_sha = {d["value_sha256"]: d for d in letters}
    for name, raw in bad.items():
        d = by_sha[hashlib.sha256(raw).hexdigest()]
        assert WHY[name] in d["error"], (name, d["error"])
        assert d["value_bytes"] == len(raw) and d["schema"] == "dead_letter/2"
        kept = base64.b64decode(d["value_b64"])
        if len(raw) > settings.limits.max_record_bytes:
            assert d["truncated"] and kept == raw[:len(kept)] and len(kept) == 64 << 10, name
        else:
            assert not d["truncated"] and kept == raw, name  # lost nothing
    assert max(len(r.value) for r in dlq) < 1.4 * (1 << 20)
    assert "'gpus.hbm_temp_c', a field this worker does not know" in logs
    assert "'rack', a field this worker does not know" in logs
    assert "counts: dead_letters=" in logs
    assert "Traceback" not in logs
    reliability_report("poison records in gpu.samples (900 kB truncated, 5 MB, 1970, 2300, node_snapshot/3)",
                       injected=len(bad), lost=len(expected - got),
                       detail=f"{len(bad)} dead letters (largest {max(len(r.value) for r in dlq)} bytes), "
                              f"2 workers alive, {len(got)} transitions = the Engine's; unknown fields read and "
                              "counted")


async def test_a_dead_letter_the_broker_refuses_is_kept_locally_and_the_worker_carries_on(
    kafka_bootstrap: str, tmp_path: Path, reliability_report
) -> None:
    """A DLQ topic created before with a small ``max.message.bytes``: the broker refuses the
    letter of a 900 kB record. It goes to the worker's ``unsent.jsonl`` with the reason."""
    settings = settings_for(kafka_bootstrap, partitions=1, snapshot_records=1)  # each batch's state on the changelog
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(kafka_bootstrap, t, partitions=1)
    await create_topic(kafka_bootstrap, Topics.dlq(topics.samples), partitions=1,
                       config={"max.message.bytes": "100000"})
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    now = time.time()
    after = snapshot("n-after", 1, now - 30)
    with workers(config, tmp_path, "w1") as (w1,):
        await produce(kafka_bootstrap, topics.samples, [(b"n1", truncated("n1")), (b"n-after", encode(after))])
        unsent = tmp_path / "w1" / "unsent.jsonl"

        async def kept() -> bool:
            return unsent.exists()

        await wait_for(kept, "the refused letter in unsent.jsonl")
        changelog = f"{app_id(settings)}-node-state-changelog"

        async def processed() -> bool:
            return any(r.key == b"n-after" for r in await read_to_end(kafka_bootstrap, changelog, 1))

        await wait_for(processed, "the valid record after the refused letter")

        async def counted() -> bool:  # the worker logs its counts when they change, at most every 5 s
            return "unsent=1" in w1.log.read_text()

        await wait_for(counted, "the worker's count of refused letters in its log")
        assert w1.alive(), w1.tail()
    (line,) = [json.loads(x) for x in unsent.read_text().splitlines()]
    assert line["topic"] == Topics.dlq(topics.samples) and "MessageSizeTooLarge" in line["error"]
    letter = json.loads(line["value"])
    assert letter["value_bytes"] == len(truncated("n1")) and letter["offset"] == 0
    reliability_report("DLQ topic refuses a dead letter (max.message.bytes 100000)", lost=0,
                       detail="the letter kept in the worker's unsent.jsonl with the reason; worker alive, "
                              "the next record applied")
