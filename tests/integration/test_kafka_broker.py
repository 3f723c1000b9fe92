"""Integration tests on a real Kafka broker (scripts/kafka-local or $KAFKA_BOOTSTRAP).

They prove the pinned broker works with the clients the pipeline uses:
aiokafka (idempotent producer, consumer groups, admin) and faust-streaming
(agent + Table with a compacted changelog topic).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections import Counter
from pathlib import Path

import faust
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gpuwarden.producers.publisher import COMPRESSION
from tests.kafka_support import (
    consume_all,
    create_topic,
    kafka_local,
    kafka_local_address,
    list_topics,
    produce,
    topic_config,
    unique_topic,
)

pytestmark = pytest.mark.kafka


async def test_idempotent_produce_and_group_consume_in_order(
    kafka_bootstrap: str, kafka_report
) -> None:
    n = 500
    topic = unique_topic("it-produce")
    group = unique_topic("it-group")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    records = [(b"k%d" % (i % 7), b"value-%06d" % i) for i in range(n)]
    producer_kw = {"acks": "all", "enable_idempotence": True, "compression_type": COMPRESSION}
    await produce(kafka_bootstrap, topic, records, **producer_kw)

    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, group_id=group,
        auto_offset_reset="earliest", enable_auto_commit=False,
    )
    await consumer.start()
    got = []
    try:
        async with asyncio.timeout(30):
            while len(got) < n:
                for batch in (await consumer.getmany(timeout_ms=1000)).values():
                    got.extend(batch)
        await consumer.commit()
        committed = await consumer.committed(TopicPartition(topic, 0))
    finally:
        await consumer.stop()

    assert [(r.key, r.value) for r in got] == records
    assert [r.offset for r in got] == list(range(n))
    assert committed == n

    # The group resumes from its committed offset: only the new records arrive.
    more = [(None, b"more-%d" % i) for i in range(20)]
    await produce(kafka_bootstrap, topic, more, **producer_kw)
    resumed = await consume_all(
        kafka_bootstrap, topic, expected=len(more), timeout=30,
        group_id=group, enable_auto_commit=False,
    )
    assert [r.offset for r in resumed] == list(range(n, n + len(more)))
    assert [r.value for r in resumed] == [v for _, v in more]
    kafka_report(f"kafka: produced {n} / consumed {len(got)} via {kafka_bootstrap} "
          f"(acks=all, idempotent, {COMPRESSION}; group resumed at offset {committed})")


async def test_faust_agent_counts_into_table_with_changelog(
    kafka_bootstrap: str, tmp_path: Path, kafka_report
) -> None:
    app_id = unique_topic("it-faust")
    source_name = f"{app_id}-events"
    # Create the source topic first: a faust consumer subscribed to a topic
    # that does not exist yet only sees it after a metadata refresh (minutes).
    await create_topic(kafka_bootstrap, source_name, partitions=1)

    app = faust.App(
        app_id,
        broker=f"kafka://{kafka_bootstrap}",
        datadir=str(tmp_path / "faust"),
        store="memory://",
        topic_partitions=1,
        topic_replication_factor=1,
        web_enabled=False,
    )
    source = app.topic(source_name, key_type=str, value_type=str, partitions=1)
    counts = app.Table("counts", default=int, partitions=1)
    processed: list[str] = []

    @app.agent(source)
    async def count(stream):  # type: ignore[no-untyped-def]
        async for key, value in stream.items():
            counts[key] += 1
            processed.append(value)

    keys = ["gpu-a"] * 15 + ["gpu-b"] * 10 + ["gpu-c"] * 5
    expected = Counter(keys)
    try:
        await asyncio.wait_for(app.start(), timeout=60)
        await produce(
            kafka_bootstrap, source_name,
            [(k.encode(), json.dumps(f"event-{i}").encode()) for i, k in enumerate(keys)],
        )
        async with asyncio.timeout(45):
            while len(processed) < len(keys):
                await asyncio.sleep(0.05)
        table = dict(counts.items())
    finally:
        await asyncio.wait_for(app.stop(), timeout=60)

    assert table == dict(expected)

    changelog = f"{app_id}-counts-changelog"
    assert changelog in await list_topics(kafka_bootstrap)
    assert "compact" in (await topic_config(kafka_bootstrap, changelog))["cleanup.policy"]
    # Every table update went to the changelog; the last value per key is the count.
    log = await consume_all(kafka_bootstrap, changelog, expected=len(keys), timeout=30)
    latest = {json.loads(r.key): json.loads(r.value) for r in log}
    assert latest == dict(expected)
    kafka_report(f"faust: {len(processed)} events -> table {table}, {len(log)} changelog records "
          f"via {kafka_bootstrap}")


def require_kafka_local(kafka_bootstrap: str) -> None:
    """Skip when $KAFKA_BOOTSTRAP names a broker that scripts/kafka-local does not run
    (e.g. docker compose); `make test` exports kafka-local's own address, which runs."""
    if os.environ.get("KAFKA_BOOTSTRAP") and kafka_local_address() != kafka_bootstrap:
        pytest.skip("KAFKA_BOOTSTRAP is a broker not run by scripts/kafka-local")


def test_kafka_local_status_and_second_start(kafka_bootstrap: str) -> None:
    require_kafka_local(kafka_bootstrap)
    status = kafka_local("status", timeout=30)
    assert status.returncode == 0, status.stdout + status.stderr
    assert status.stdout.startswith("running") and kafka_bootstrap in status.stdout

    again = kafka_local("start", timeout=60)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stderr
    assert again.stdout.strip().splitlines()[-1] == kafka_bootstrap


def test_kafka_local_second_broker_start_stop(kafka_bootstrap: str, tmp_path: Path) -> None:
    """A second broker in its own KAFKA_LOCAL_DIR starts, reports status and stops."""
    require_kafka_local(kafka_bootstrap)
    env = {"KAFKA_LOCAL_DIR": str(tmp_path / "kafka")}
    started = kafka_local("start", timeout=180, env=env)
    assert started.returncode == 0, started.stderr
    address = started.stdout.strip().splitlines()[-1]
    assert address != kafka_bootstrap and address.startswith("127.0.0.1:")
    try:
        status = kafka_local("status", timeout=30, env=env)
        assert status.returncode == 0 and address in status.stdout
    finally:
        stopped = kafka_local("stop", timeout=90, env=env)
    assert stopped.returncode == 0, stopped.stderr
    status = kafka_local("status", timeout=30, env=env)
    assert status.returncode == 1 and status.stdout.startswith("not running")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(address.rsplit(":", 1)[1])), timeout=1).close()
