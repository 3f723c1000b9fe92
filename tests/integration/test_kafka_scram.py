"""SASL_PLAINTEXT + SCRAM-SHA-256 on a second local broker (scripts/kafka-local start --scram)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from tests.kafka_support import ScramBroker, consume_all, create_topic, produce, unique_topic

pytestmark = pytest.mark.kafka


async def test_scram_user_can_produce_and_consume(kafka_scram: ScramBroker) -> None:
    topic = unique_topic("it-scram")
    auth = kafka_scram.client_kwargs()
    await create_topic(kafka_scram.bootstrap, topic, **auth)
    records = [(None, b"secure-%d" % i) for i in range(50)]
    await produce(kafka_scram.bootstrap, topic, records, acks="all", **auth)
    got = await consume_all(kafka_scram.bootstrap, topic, expected=len(records), **auth)
    assert [r.value for r in got] == [v for _, v in records]
    print(f"kafka scram: {len(got)} records as {kafka_scram.username} via {kafka_scram.bootstrap}")


async def test_scram_wrong_password_is_rejected(
    kafka_scram: ScramBroker, caplog: pytest.LogCaptureFixture
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_scram.bootstrap, request_timeout_ms=10_000,
        **kafka_scram.client_kwargs(password="not-the-password"),
    )
    try:
        with pytest.raises(KafkaConnectionError):
            await producer.start()
    finally:
        await producer.stop()
    # aiokafka raises a generic connection error; the reason is only in its log.
    assert "SaslAuthenticationFailed" in caplog.text


async def test_plaintext_client_is_rejected_by_scram_listener(kafka_scram: ScramBroker) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka_scram.bootstrap, request_timeout_ms=10_000)
    try:
        with pytest.raises(KafkaConnectionError):
            await producer.start()
    finally:
        await producer.stop()
