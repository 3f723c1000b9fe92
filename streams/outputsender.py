"""The stream worker's outputs (alerts, summaries, progress reports, dead letters) go through an
aiokafka producer of the worker's own that tracks every output topic from its start.

Not faust's producer: an aiokafka client tracks only the topics it was asked to send to, and
fetches metadata for *every* topic while it tracks none. faust's topic declarations refresh its
producer's metadata in that state (every topic known, none tracked), so a send to a known topic
adds nothing; the first send to a topic not known yet then makes the client track that one alone,
and the next metadata refresh drops every other topic. A record sent just before it, still in the
producer's accumulator, waits for a partition leader the client no longer asks about, until its
delivery timeout (faust's: 20 min). Seen in ``tests/streams_kafka/test_inference_kafka.py`` (1 run
in 20 on a loaded box): a dead letter sent, then the first alert to a topic created 40 ms earlier,
and the worker's batch held for good; shown alone with aiokafka in
``tests/streams_kafka/test_output_sender.py``. Asked for each output topic once it exists
(``AIOKafkaProducer.partitions_for``), this producer tracks them all, so no refresh drops one.

Changelog records still go through the tables (``Table.send_changelog``): faust's producer then
sends to nothing else, and a table's envelopes are sent and awaited before the next table's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaProducer

from gpuwarden.kafka import start_client
from gpuwarden.streams.dlq import Outbound


class OutputSender:
    """One producer for the worker's outputs, started once the output topics exist."""

    def __init__(self, client_kw: Mapping[str, Any], *, compression: str, max_request_size: int,
                 linger_ms: int = 0) -> None:
        self.client_kw = dict(client_kw)
        self.compression = compression
        self.max_request_size = max_request_size
        self.linger_ms = linger_ms  # how long a batch waits for more records (0: sent at once)
        self.producer: AIOKafkaProducer | None = None
        self._starting: asyncio.Future[AIOKafkaProducer] | None = None

    async def start(self, topics: Iterable[str]) -> AIOKafkaProducer:
        """The producer, started and tracking ``topics`` (which must exist); once."""
        starting = self._starting
        if starting is None or (starting.done() and (starting.cancelled() or starting.exception() is not None)):
            self._starting = asyncio.ensure_future(self._start(list(topics)))
        return await asyncio.shield(self._starting)

    async def _start(self, topics: list[str]) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(**self.client_kw, acks="all", enable_idempotence=True,
                                    compression_type=self.compression, max_request_size=self.max_request_size,
                                    linger_ms=self.linger_ms)
        await start_client(producer, self.client_kw)
        try:
            for topic in topics:
                await producer.partitions_for(topic)  # tracked from now on: no refresh drops it
        except BaseException:
            await producer.stop()
            raise
        self.producer = producer
        return producer

    async def send(self, o: Outbound) -> asyncio.Future[Any]:
        """Append ``o`` to the producer's batch; the future resolves once the broker has it."""
        producer = self.producer
        assert producer is not None, "OutputSender.start first"
        return await producer.send(o.topic, o.value, key=o.key, partition=o.partition,
                                   headers=list(o.headers) or None)

    async def stop(self) -> None:
        """Flush what is pending and close."""
        producer, self.producer, self._starting = self.producer, None, None
        if producer is not None:
            await producer.stop()
