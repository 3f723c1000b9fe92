"""The worker's output producer keeps every output topic in its metadata (streams/outputsender.py).

aiokafka's client fetches metadata for every topic while it tracks none (the state faust's topic
declarations leave its producer in), and tracks a topic only when a send finds it unknown; the
next refresh then drops every topic it does not track. A record still in the accumulator for a
dropped topic waits for a leader nobody asks about. The first test shows that with a plain
producer (the path the worker's outputs took through faust's producer: a dead letter stranded
behind the first alert to a new topic, the batch held for good); the second, that the output
sender delivers the same sequence.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from gpuwarden.streams.dlq import Outbound
from gpuwarden.streams.outputsender import OutputSender
from tests.kafka_support import create_topic

pytestmark = pytest.mark.kafka

LINGER_MS = 300  # the record waits in the accumulator while the other send narrows the metadata


def _names() -> tuple[str, str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"out-dlq-{tag}", f"out-alerts-{tag}", f"other-{tag}"


async def test_a_plain_producer_strands_a_record_when_its_metadata_narrows(kafka_bootstrap: str) -> None:
    letters, alerts, _ = _names()
    await create_topic(kafka_bootstrap, letters, partitions=1)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=LINGER_MS)
    await producer.start()
    try:
        await producer.client.force_metadata_update()  # as faust's create_topic does: all topics, none tracked
        await create_topic(kafka_bootstrap, alerts, partitions=1)
        letter = await producer.send(letters, b"dead letter")  # known: not tracked
        alert = await producer.send(alerts, b"alert")  # unknown: tracked alone, the refresh drops `letters`
        await asyncio.wait_for(alert, 20)
        done, _ = await asyncio.wait({letter}, timeout=10)
        assert not done, "aiokafka delivered the stranded record: the defect streams/outputsender.py works around is gone"
        # The next send to that topic finds it unknown and tracks it: both go (so the producer stops).
        again = await producer.send(letters, b"dead letter 2")
        assert [(await asyncio.wait_for(f, 20)).offset for f in (letter, again)] == [0, 1]
    finally:
        await producer.stop()


async def test_the_output_sender_delivers_the_same_sequence(kafka_bootstrap: str) -> None:
    letters, alerts, other = _names()
    await create_topic(kafka_bootstrap, letters, partitions=1)
    await create_topic(kafka_bootstrap, alerts, partitions=1)
    sender = OutputSender({"bootstrap_servers": kafka_bootstrap}, compression="zstd", max_request_size=1 << 20,
                          linger_ms=LINGER_MS)
    producer = await sender.start([letters, alerts])
    try:
        await producer.client.force_metadata_update()
        await create_topic(kafka_bootstrap, other, partitions=1)
        letter = await sender.send(Outbound(letters, b"k", b"dead letter"))
        # a topic outside the outputs, unknown: tracked too, and the refresh keeps the outputs
        await asyncio.wait_for(await producer.send(other, b"x"), 20)
        alert = await sender.send(Outbound(alerts, b"k", b"alert", partition=0))
        assert (await asyncio.wait_for(letter, 20)).offset == 0
        assert (await asyncio.wait_for(alert, 20)).offset == 0
    finally:
        await sender.stop()
