"""A faust consumer that hands whole fetches of chosen topics to one coroutine.

faust's fetch loop (``Consumer._drain_messages``) awaits ``wait_first`` (two new
tasks) for every record, then the conductor builds an Event, puts it on a channel
queue and a Stream takes it off again: ~130-200 µs per record on our machines,
more than decoding a node snapshot and running the engine on it. For the topics
given to :func:`batch_consumer` the loop below skips all of that: each fetch's
records of those topics go to ``handle`` in one call. Everything else stays
faust's: group membership and its assignor, flow control during rebalances,
changelog tables and their recovery (changelog records still take the per-record
path), read offsets, highwaters and offset commits — the handler acknowledges
records with :meth:`BatchConsumer.ack_offsets` once they are safe, and faust's
commit loop commits them.

This overrides one internal method of faust-streaming's aiokafka driver, written
against 0.15.x (pinned in pyproject.toml); tests/streams_kafka exercise it on a
real broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aiokafka.structs import TopicPartition
from faust.exceptions import ConsumerNotStarted
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaConsumer
from faust.types import TP

#: ``handle(records)``: the records of one fetch, per partition in offset order.
BatchHandler = Callable[[Mapping[TP, list[Any]]], Awaitable[None]]
#: ``idle()``: a fetch came back empty (about once a second while there is nothing to read).
IdleHandler = Callable[[], Awaitable[None]]


class _Acked:
    """The fields ``Consumer.ack`` reads from a message."""

    __slots__ = ("acked", "tp", "topic", "offset", "__weakref__")  # faust keeps a WeakSet

    def __init__(self, tp: TP, offset: int) -> None:
        self.acked = False
        self.tp, self.topic, self.offset = tp, tp.topic, offset


class BatchConsumer(AIOKafkaConsumer):
    """faust's aiokafka consumer, with fetches of ``batch_topics`` delivered to ``handle``."""

    #: The broker answers a fetch once this much is there, or after ``fetch_max_wait_ms``.
    #: faust leaves aiokafka's 1 byte (and 1,500 ms): live, a fetch came back as soon as any
    #: record arrived, ~4 records per fetch at 5,000 GPUs, and per-fetch work outweighed the
    #: records' own (bench/scale_run.py; docs/benchmarks-notes.md, session 5).
    fetch_min_bytes = 128 << 10
    fetch_max_wait_ms = 250
    batch_topics: frozenset[str] = frozenset()
    handle: BatchHandler
    idle: IdleHandler | None = None
    _seeks = 0  # seeks so far: read offsets set by one must not be overwritten
    _started = -1  # the generation whose first fetch was logged

    async def seek(self, partition: TP, offset: int) -> None:
        self._seeks += 1
        await super().seek(partition, offset)

    async def perform_seek(self) -> None:
        """faust's seek to the committed offsets, plus: a partition of ours with nothing
        committed yet goes back to its beginning (``auto_offset_reset`` earliest). faust leaves
        such a partition where the fetcher stood, past records it dropped in a rebalance (it
        drops every fetch made while the flow is stopped), so those records were lost."""
        self._seeks += 1
        await super().perform_seek()
        if self.app.conf.consumer_auto_offset_reset != "earliest":
            return
        fresh = [tp for tp in self.assignment()
                 if tp.topic in self.batch_topics and not self._committed_offset.get(tp)]
        if fresh:
            await self._thread.seek_to_beginning(*(TopicPartition(tp.topic, tp.partition) for tp in fresh))
            for tp in fresh:
                self._read_offset[tp] = None

    def polled(self, tp: TP) -> tuple[int | None, int | None]:
        """(high-water mark, wall time in ms the fetcher read it); Nones until the first fetch
        response for ``tp`` (or when it is not assigned). The fetcher asks for a partition only
        while it holds no records of it, so one partition's mark can be older than another's
        records."""
        try:
            return self.highwater(tp), self._thread._ensure_consumer().last_poll_timestamp(tp)
        except (AssertionError, ConsumerNotStarted):
            return None, None

    def ack_offsets(self, acked: Iterable[tuple[TP, int]]) -> None:
        """Mark these records processed: faust commits each partition up to its first gap."""
        for tp, offset in acked:
            self.ack(_Acked(tp, offset))  # type: ignore[arg-type]

    async def _call(self, handler: Callable[..., Awaitable[None]], *args: Any) -> bool:
        """Run a handler; False (and the worker stops) if it raised: a fetch loop that died
        would stall silently."""
        try:
            await handler(*args)
        except Exception as exc:
            self.log.exception("batch handler raised: %r", exc)
            await self.app.crash(exc)
            return False
        return True

    def _tune_fetches(self) -> None:
        """Set the fetch size and wait on aiokafka's fetcher, which reads them at every fetch
        request: faust builds the consumer without either setting."""
        fetcher = self._thread._ensure_consumer()._fetcher
        fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms = self.fetch_min_bytes, self.fetch_max_wait_ms

    async def _drain_messages(self, fetcher: Any) -> None:  # noqa: C901 - mirrors faust's loop
        self._tune_fetches()
        callback, batch_topics = self.callback, self.batch_topics
        read_offset = self._read_offset
        consumer_stopped, fetcher_stopped = self._stopped.is_set, fetcher._stopped.is_set
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                self.diag.set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(timeout=1.0)
                await self.sleep(0)
                if self.should_stop:
                    continue
                if not records:
                    if self.idle is not None and self.flow_active:
                        await self._call(self.idle)
                    continue
                if not self.flow_active:  # a rebalance began: faust seeks back to committed offsets
                    await self.perform_seek()
                    continue
                generation, seeks = self.app.consumer_generation_id, self._seeks
                batch: dict[TP, list[Any]] = {}
                for tp, recs in records.items():
                    if active is not None and tp not in active and tp not in self._buffered_partitions:
                        continue
                    self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    start = read_offset[tp]
                    if start is not None:
                        recs = [r for r in recs if r.offset >= start]
                    if not recs:
                        continue
                    if tp.topic in batch_topics:
                        batch[tp] = recs
                        continue
                    for rec in recs:  # changelogs and other channels: faust's own path
                        await self.wait_first(callback(self._to_message(tp, rec)), self.suspend_flow.wait())
                        read_offset[tp] = rec.offset
                self.diag.unset_flag(CONSUMER_FETCHING)
                if not batch:
                    continue
                await self.app.flow_control.acquire()
                if generation != self.app.consumer_generation_id or not self.flow_active:
                    continue  # fetched before a rebalance: read again from the committed offsets
                if generation != self._started:
                    self._started = generation
                    self.log.info("generation %s: first fetch, %d records from %d partitions", generation,
                                  sum(map(len, batch.values())), len(batch))
                if not await self._call(self.handle, batch):
                    return
                # A rebalance or a seek during the handler set positions back to the committed
                # offsets: read those again (the runner skips what a key's state already holds).
                if generation == self.app.consumer_generation_id and seeks == self._seeks:
                    for tp, recs in batch.items():
                        read_offset[tp] = recs[-1].offset
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise


def batch_consumer(topics: Iterable[str], handle: BatchHandler,
                   idle: IdleHandler | None = None) -> type[BatchConsumer]:
    """A :class:`BatchConsumer` class for one app (``app.transport.Consumer = ...``)."""
    return type("BatchConsumer", (BatchConsumer,), {"batch_topics": frozenset(topics),
                                                     "handle": staticmethod(handle),
                                                     "idle": staticmethod(idle) if idle else None})
