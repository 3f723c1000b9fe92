"""Kafka plumbing for the notifier: client options, the compacted ``control`` topic."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from gpuwarden.config import KafkaConfig
from gpuwarden.contract import ContractError, Topics, encode, record_key
from gpuwarden.humantime import span
from gpuwarden.kafka import kafka_kwargs
from gpuwarden.topics import CONTROL
from gpuwarden.notifiers.control import ControlRecord, ControlState, warn_each

READ_TIMEOUT_S = 15.0


async def ensure_control_topic(kafka: KafkaConfig) -> list[TopicPartition]:
    """Create the compacted control topic if it is missing; returns its partitions once the broker
    reports them (a topic just created has none for a moment)."""
    topic = Topics(kafka.topic_prefix).control
    admin = AIOKafkaAdminClient(**kafka_kwargs(kafka))
    await admin.start()
    try:
        try:
            await admin.create_topics([NewTopic(
                topic, num_partitions=CONTROL.partitions, replication_factor=kafka.replication_factor,
                topic_configs=dict(CONTROL.config))])
        except TopicAlreadyExistsError:
            pass
        for _ in range(50):
            (found,) = await admin.describe_topics([topic])
            if found["error_code"] == 0 and found["partitions"]:
                return [TopicPartition(topic, p["partition"]) for p in sorted(found["partitions"],
                                                                              key=lambda p: p["partition"])]
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    raise TimeoutError(f"no metadata for topic {topic}")


async def write_control(kafka: KafkaConfig, record: ControlRecord) -> None:
    """Produce one control record keyed by ``record_key`` and wait for the ack."""
    topic = (await ensure_control_topic(kafka))[0].topic
    producer = AIOKafkaProducer(**kafka_kwargs(kafka), acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topic, encode(record), key=record_key(record).encode())
    finally:
        await producer.stop()


async def read_control(kafka: KafkaConfig) -> ControlState:
    """The control state as of now: the topic read from the beginning to its end offsets."""
    parts = await ensure_control_topic(kafka)
    state = ControlState()
    consumer = AIOKafkaConsumer(**kafka_kwargs(kafka), enable_auto_commit=False)
    await consumer.start()
    try:
        await assign_from_beginning(consumer, parts)
        warn_each(await catch_up(consumer, parts, state))
    finally:
        await consumer.stop()
    return state


async def catch_up(consumer: AIOKafkaConsumer, parts: list[TopicPartition], state: ControlState) -> list[str]:
    """Apply records until the end offsets seen now; returns a line per bad record."""
    ends = await consumer.end_offsets(parts)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READ_TIMEOUT_S
    problems: list[str] = []
    while [p for p in parts if await consumer.position(p) < ends[p]]:
        if loop.time() > deadline:
            raise TimeoutError(f"reading {parts[0].topic} took over {span(READ_TIMEOUT_S)}")
        problems += poll(await consumer.getmany(timeout_ms=200), state)
    return problems


def poll(batch: dict[TopicPartition, list[ConsumerRecord]], state: ControlState) -> list[str]:
    """Apply a fetched batch of control records; returns a line per bad record."""
    return [p for records in batch.values() for r in records
            if (p := apply_record(state, r.key, r.value)) is not None]


async def assign_from_beginning(consumer: AIOKafkaConsumer, parts: list[TopicPartition]) -> None:
    """Assign ``parts`` (no consumer group: every worker reads all of them) and rewind to the start."""
    consumer.assign(parts)
    await consumer.seek_to_beginning(*parts)


def apply_record(state: ControlState, key: bytes | None, value: bytes | None) -> str | None:
    """Apply one control-topic record; returns a problem line instead of raising on a bad one."""
    if key is None:
        return "control record without a key (ignored)"
    try:
        state.apply_raw(key.decode(errors="replace"), value)
    except ContractError as e:
        return f"control record {key.decode(errors='replace')}: {e}"
    return None
