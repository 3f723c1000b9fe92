"""Kafka plumbing for the notifier: client options, the compacted ``control`` topic."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from gpuwarden.contract import ContractError, Topics, encode, record_key
from gpuwarden.kafka import client_kwargs

READ_TIMEOUT_S = 15.0


async def ensure_control_topic(settings: Any) -> str:
    """Create the compacted control topic if it is missing; returns its name."""
    topic = Topics(settings.kafka.topic_prefix).control
    admin = AIOKafkaAdminClient(**client_kwargs(settings))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(
            topic, num_partitions=1, replication_factor=settings.kafka.replication_factor,
            topic_configs={"cleanup.policy": "compact"})])
    except TopicAlreadyExistsError:
        pass
    finally:
        await admin.close()
    return topic


async def write_control(settings: Any, record: Any) -> None:
    """Produce one control record keyed by ``record_key`` and wait for the ack."""
    topic = await ensure_control_topic(settings)
    producer = AIOKafkaProducer(**client_kwargs(settings), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode(record), key=record_key(record).encode())
    finally:
        await producer.stop()


async def read_control(settings: Any) -> Any:
    """The control state as of now: the topic read from the beginning to its end offsets."""
    from gpuwarden.notifiers.control import ControlState, warn_each

    topic = await ensure_control_topic(settings)
    state = ControlState()
    consumer = AIOKafkaConsumer(**client_kwargs(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        warn_each(await catch_up(consumer, await assign_from_beginning(consumer, topic), state))
    finally:
        await consumer.stop()
    return state


async def catch_up(consumer: AIOKafkaConsumer, parts: list[TopicPartition], state: Any) -> list[str]:
    """Apply records until the end offsets seen now; returns a line per bad record."""
    ends = await consumer.end_offsets(parts)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_TIMEOUT_S
    problems: list[str] = []
    while [p for p in parts if await consumer.position(p) < ends[p]]:
        if loop.time() > deadline:
            raise TimeoutError(f"reading {parts[0].topic} took over {READ_TIMEOUT_S:.0f} s")
        problems += poll(await consumer.getmany(timeout_ms=200), state)
    return problems


def poll(batch: dict[TopicPartition, list[Any]], state: Any) -> list[str]:
    """Apply a fetched batch of control records; returns a line per bad record."""
    return [p for records in batch.values() for r in records
            if (p := apply_record(state, r.key, r.value)) is not None]


async def assign_from_beginning(consumer: AIOKafkaConsumer, topic: str) -> list[TopicPartition]:
    """Assign every partition of ``topic`` (no consumer group) and rewind to the start."""
    for _ in range(50):
        found = consumer.partitions_for_topic(topic)
        if found:
            parts = [TopicPartition(topic, p) for p in sorted(found)]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            return parts
        await consumer._client.force_metadata_update()  # noqa: SLF001 (no public metadata refresh)
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no metadata for topic {topic}")


def apply_record(state: Any, key: bytes | None, value: bytes | None) -> str | None:
    """Apply one control-topic record; returns a problem line instead of raising on a bad one."""
    if key is None:
        return "control record without a key (ignored)"
    try:
        state.apply_raw(key.decode(errors="replace"), value)
    except ContractError as e:
        return f"control record {key.decode(errors='replace')}: {e}"
    return None
