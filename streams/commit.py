"""A task's transactions: its outputs, batch log, snapshot and input offsets, committed as one.

One transactional producer per task, ``transactional_id`` = group + task (Kafka Streams' EOS
model): starting it fences every earlier producer of that task (a worker that lost the task but
does not know yet, a *zombie*), whose next transactional request fails, and aborts or completes
whatever transaction it left open, so what the new owner then reads is settled. The input offsets
go in the transaction (``send_offsets_to_transaction``): outputs, state and offsets are on the
broker together or not at all, and readers of the outputs read ``read_committed``.

aiokafka's ``send_offsets_to_transaction`` takes only the group id (no generation or member, as
KIP-447's does), so the broker does not check that the committing worker is still the group's
owner of those partitions; the per-task transactional id is what fences a zombie, and a new owner
reads the committed offsets only after its producer has started (docs/streams-kafka.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import cramjam
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.errors import IllegalOperation, ProducerFenced
from aiokafka.structs import OffsetAndMetadata, RecordMetadata

from gpuwarden.kafka import start_client
from gpuwarden.streams.dlq import Outbound
from gpuwarden.streams.statewire import COMPRESSION, MAX_RECORD_BYTES

#: A commit (or an abort) not done in this long fails, and the task is restored (the broker is
#: away or the transaction coordinator moved; the fence makes an in-doubt one safe either way).
COMMIT_TIMEOUT_S = 30.0


class TaskProducer:
    """The producer of one task. What a task makes is held here until its transaction is
    committed, then sent at once: a transaction costs one AddPartitionsToTxn and one Produce per
    broker, not one of each per batch that added something (the round trips were most of a live
    worker's CPU beside its engine: docs/benchmarks.md, live cost). Nothing is visible before the
    commit either way (readers read ``read_committed``)."""

    def __init__(self, client_kw: Mapping[str, Any], transactional_id: str, topics: Iterable[str],
                 limits: Mapping[str, int]) -> None:
        self.client_kw = dict(client_kw)
        self.transactional_id = transactional_id
        self.topics = tuple(topics)
        self.limits = limits  # per topic, the largest record its broker config takes (max.message.bytes)
        self.producer = AIOKafkaProducer(**self.client_kw, transactional_id=transactional_id, enable_idempotence=True,
                                         acks="all", compression_type=COMPRESSION, max_request_size=MAX_RECORD_BYTES)
        self.held: list[Outbound] = []  # made since the last commit, not sent yet
        self.began = False  # a transaction is open on the broker's side
        self._sent: list[asyncio.Future[RecordMetadata]] = []

    @property
    def open(self) -> bool:
        """Whether the next commit (or stop) has anything to settle."""
        return self.began or bool(self.held)

    async def start(self) -> None:
        """Connect, fence the task's earlier producers, and track every topic it sends to (an
        aiokafka client that tracks none fetches all topics' metadata, and the first send to a
        new topic then narrows it to that one, stranding records bound elsewhere)."""
        await start_client(self.producer, self.client_kw)
        for topic in self.topics:
            await self.producer.partitions_for(topic)

    def fits(self, o: Outbound) -> bool:
        """Whether the broker will take ``o`` (its topic's ``max.message.bytes``, compressed as
        sent): inside a transaction a refused record would fail the whole commit, again at every
        retry, so one that cannot fit is kept locally instead of sent (``UnsentLog``)."""
        limit = self.limits.get(o.topic, MAX_RECORD_BYTES) - 512  # record and batch headers
        size = len(o.value) + len(o.key or b"")
        return size <= limit or len(cramjam.zstd.compress(o.value, level=3)) + len(o.key or b"") <= limit

    def hold(self, out: Iterable[Outbound]) -> None:
        """``out`` goes in the open transaction (opened if none), sent when it is committed."""
        self.held.extend(out)

    async def send(self, out: Iterable[Outbound]) -> list[asyncio.Future[RecordMetadata]]:
        """What is held, then ``out``, sent now; the futures of ``out``'s records (a snapshot's
        marker needs the offset its batch log record got)."""
        held, self.held = self.held, []
        futs = await self._produce([*held, *out])
        return futs[len(held):]

    async def _produce(self, out: list[Outbound]) -> list[asyncio.Future[RecordMetadata]]:
        if not out:
            return []
        if not self.began:
            await self.producer.begin_transaction()
            self.began = True
        try:
            futs = [await self.producer.send(o.topic, o.value, key=o.key, partition=o.partition,
                                             headers=list(o.headers) or None) for o in out]
        except IllegalOperation as e:  # aiokafka ended the transaction under us: a new owner fenced it
            raise ProducerFenced() from e
        self._sent += futs
        return futs

    async def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: str) -> None:
        """What is held, sent, and the open transaction committed with these input offsets of
        the consumer ``group``."""
        async def run() -> None:
            await self.send([])
            await asyncio.gather(*self._sent)
            await self.producer.send_offsets_to_transaction(dict(offsets), group)
            await self.producer.commit_transaction()
        await asyncio.wait_for(run(), COMMIT_TIMEOUT_S)
        self.began, self._sent = False, []

    async def stop(self) -> None:
        """Abort what is open (best effort: the next owner's fence aborts it anyway) and close."""
        self.held = []
        try:
            if self.began:
                await asyncio.wait_for(self.producer.abort_transaction(), 5)
        except Exception:  # noqa: BLE001 - fenced or the broker away: nothing more to do here
            pass
        self.began = False
        await asyncio.wait_for(self.producer.stop(), 10)
