"""Integration tests on a real Kafka broker (scripts/kafka-local or $KAFKA_BOOTSTRAP).

They prove the pinned broker works with the clients the pipeline uses:
aiokafka (idempotent producer, consumer groups, admin, transactions with offsets and fencing: what
the stream runtime relies on).
"""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gpuwarden.producers.publisher import COMPRESSION
from tests.kafka_support import (
    consume_all,
    create_topic,
    kafka_local,
    kafka_local_address,
    produce,
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
        kafka_bootstrap, topic, expected=len(more),
        group_id=group, enable_auto_commit=False,
    )
    assert [r.offset for r in resumed] == list(range(n, n + len(more)))
    assert [r.value for r in resumed] == [v for _, v in more]
    kafka_report(f"kafka: produced {n} / consumed {len(got)} via {kafka_bootstrap} "
          f"(acks=all, idempotent, {COMPRESSION}; group resumed at offset {committed})")


async def test_transactions_hide_aborts_and_fence_a_zombie(kafka_bootstrap: str, kafka_report) -> None:
    """What the stream runtime borrows from the broker (docs/streams-kafka.md): a read_committed
    reader never sees an aborted transaction's records, offsets committed in a transaction move
    the group only when it commits, and a second producer with the same transactional id fences
    the first, whose commit then fails."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import InvalidProducerEpoch, ProducerFenced
    from aiokafka.structs import OffsetAndMetadata

    topic, source, group = unique_topic("it-tx"), unique_topic("it-tx-in"), unique_topic("it-tx-group")
    await create_topic(kafka_bootstrap, topic, partitions=1)
    await create_topic(kafka_bootstrap, source, partitions=1)
    tid = unique_topic("it-tx-id")

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=tid, enable_idempotence=True)

    first, second = producer(), producer()
    await first.start()
    try:
        async with first.transaction():
            await first.send_and_wait(topic, b"committed-1")
            await first.send_offsets_to_transaction({TopicPartition(source, 0): OffsetAndMetadata(7, "a")}, group)
        await first.begin_transaction()
        await first.send_and_wait(topic, b"aborted")
        await first.abort_transaction()
        await first.begin_transaction()
        await first.send_and_wait(topic, b"zombie")
        await first.send_offsets_to_transaction({TopicPartition(source, 0): OffsetAndMetadata(9, "z")}, group)
        await second.start()  # the new owner: its InitProducerId aborts the open one and fences `first`
        with pytest.raises((ProducerFenced, InvalidProducerEpoch)):
            await first.commit_transaction()
        async with second.transaction():
            await second.send_and_wait(topic, b"committed-2")
    finally:
        await first.stop()
        await second.stop()

    async def read(isolation: str) -> list[bytes]:
        c = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, isolation_level=isolation)
        await c.start()
        try:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            end = (await c.end_offsets([tp]))[tp]
            out: list[bytes] = []
            async with asyncio.timeout(30):
                while await c.position(tp) < end:
                    out += [r.value for r in (await c.getmany(tp, timeout_ms=500)).get(tp, [])]
            return out
        finally:
            await c.stop()

    assert await read("read_committed") == [b"committed-1", b"committed-2"]
    assert set(await read("read_uncommitted")) == {b"committed-1", b"aborted", b"zombie", b"committed-2"}
    c = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=group, enable_auto_commit=False)
    await c.start()
    try:
        committed = await c.committed(TopicPartition(source, 0))
    finally:
        await c.stop()
    assert committed == 7  # the fenced transaction's offsets never landed
    kafka_report(f"kafka transactions: aborted and fenced records hidden from read_committed, group offset "
                 f"{committed} via {kafka_bootstrap}")


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
