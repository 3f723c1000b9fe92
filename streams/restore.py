"""Restoring a task before it processes: its envelopes and snapshot, then its batch log replayed.

Run by the worker after the task's producer has fenced the previous owner (so every transaction of
the task is committed or aborted, and the group's offsets materialised). Everything is read with
``read_committed``: what an aborted transaction wrote is not state. The task's changelog
partitions give each key's latest envelope and the snapshot :class:`Marker`; the batch log from
the marker's offset gives the batches since; the inputs from the marker's positions are applied
in exactly those batches, outputs dropped (they were committed with the batches). The replay then
stands where the committed offsets do. Without a marker (a task never snapshotted, or a changelog
of the faust-era workers) reading resumes at the committed offsets (or the beginning) on the
envelopes as stored; the runtime writes a first snapshot at once.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from gpuwarden.streams.batchlog import Entry, Marker, decode_entries, decode_marker
from gpuwarden.streams.statewire import MARKER, batchlog_topic, changelog_topic
from gpuwarden.streams.task import Batch, Task, digest

log = logging.getLogger("gpuwarden.streams")

#: A read that makes no progress for this long fails the restore (the worker tries again later).
STALL_S = 60.0


class RestoreError(Exception):
    """A task could not be restored now (records missing, or the broker away)."""


@dataclass
class Restored:
    """Where a restored task's inputs resume, and what the restore read."""

    positions: dict[TopicPartition, int]
    marker: bool
    keys: int
    replayed: int  # input records applied again
    batches: int
    diverged: int  # batches whose outputs differed from the logged digest
    seconds: float


class Restorer:
    """One consumer outside the group (``read_committed``), reused for every restore of a worker.

    It holds no partitions between restores: the broker answers a connection's requests in
    order, so an offsets request behind a fetch waiting for data (``fetch_max_wait_ms``) waited
    half a second; the runtime asks its end offsets through it too."""

    def __init__(self, consumer: AIOKafkaConsumer, app: str, group_tables: Mapping[str, tuple[str, ...]]) -> None:
        self.consumer, self.app, self.tables = consumer, app, group_tables

    async def restore(self, task: Task, committed: Mapping[TopicPartition, int]) -> Restored:
        try:
            return await self._restore(task, committed)
        finally:
            self.consumer.unsubscribe()

    async def _restore(self, task: Task, committed: Mapping[TopicPartition, int]) -> Restored:
        began = time.monotonic()
        p = task.id.partition
        marker: Marker | None = None
        keys = 0
        for i, table in enumerate(self.tables[task.id.group]):
            latest = await self._latest(TopicPartition(changelog_topic(self.app, table), p))
            if i == 0 and (raw := latest.pop(MARKER, None)) is not None:
                marker = decode_marker(raw)
            runner = task.tables[table]
            for key, envelope in sorted(latest.items()):
                keys += runner.restore(key.decode(), envelope)
        tps = [TopicPartition(t, p) for t in task.inputs]
        if marker is None:
            first = await self.consumer.beginning_offsets(tps)
            positions = {tp: committed.get(tp, first[tp]) for tp in tps}
            return Restored(positions, False, keys, 0, 0, 0, time.monotonic() - began)
        task.load(marker.task)
        entries = await self._entries(TopicPartition(batchlog_topic(self.app, task.id.group), p), marker.log)
        first = await self.consumer.beginning_offsets(tps)
        start = {tp: marker.positions.get(tp.topic, first[tp]) for tp in tps}
        outside = sum(r.outside for r in task.tables.values())
        positions, replayed, diverged = await self._replay(task, start, entries, outside)
        moved = {tp: (positions[tp], committed[tp]) for tp in tps if tp in committed and committed[tp] != positions[tp]}
        if moved:  # the log and the offsets are committed together: this is a defect, say so
            log.error("task %s: the batch log ends at %s but the committed offsets are %s: resuming at the "
                      "committed offsets", task.id, {str(k): v[0] for k, v in moved.items()},
                      {str(k): v[1] for k, v in moved.items()})
            positions.update({tp: c for tp, (_, c) in moved.items()})
        return Restored(positions, True, keys, replayed, len(entries), diverged, time.monotonic() - began)

    async def _latest(self, tp: TopicPartition) -> dict[bytes, bytes]:
        """The latest value per key of a compacted partition (a key whose latest is a tombstone: none)."""
        out: dict[bytes, bytes] = {}
        for r in await self._read(tp, None, None):
            if r.key is not None:
                if r.value is None:
                    out.pop(r.key, None)
                else:
                    out[r.key] = r.value
        return out

    async def _entries(self, tp: TopicPartition, start: int) -> list[Entry]:
        entries: list[Entry] = []
        for r in await self._read(tp, start, None):
            if r.value is not None:
                entries.extend(decode_entries(r.value))
        return entries

    async def _read(self, tp: TopicPartition, start: int | None, end: int | None) -> list[ConsumerRecord]:
        """``tp``'s records from ``start`` (None: the beginning) to ``end`` (None: the end now)."""
        c = self.consumer
        c.assign([tp])
        if start is None:
            await c.seek_to_beginning(tp)
        else:
            c.seek(tp, start)
        if end is None:
            end = (await c.end_offsets([tp]))[tp]
        out: list[ConsumerRecord] = []
        while await c.position(tp) < end:
            out.extend(r for r in await self._fetch(tp) if r.offset < end)
        return out

    async def _fetch(self, tp: TopicPartition) -> list[ConsumerRecord]:
        """The next records of ``tp``, or none once its position moved past records a reader does
        not get (transaction markers, aborted records); :class:`RestoreError` after ``STALL_S``
        without either. Short waits: a fetch that brings only markers returns no records."""
        c = self.consumer
        before, deadline = await c.position(tp), time.monotonic() + STALL_S
        while True:
            got = (await c.getmany(tp, timeout_ms=200)).get(tp, [])
            if got or await c.position(tp) != before:
                return got
            if time.monotonic() > deadline:
                raise RestoreError(f"{tp.topic}:{tp.partition}: nothing read past offset {before} for {STALL_S:g} s")

    async def _replay(self, task: Task, start: dict[TopicPartition, int],
                      entries: list[Entry], outside: int) -> tuple[dict[TopicPartition, int], int, int]:
        """Apply the logged batches again on the restored task; returns where they end, how many
        records they held and how many made other outputs than logged. With ``outside`` keys
        whose state was written outside the workers (``baseline bootstrap --to-kafka`` while they
        were stopped) other outputs are expected: the logged run did not have that state."""
        c = self.consumer
        tps = list(start)
        by_topic = {tp.topic: tp for tp in tps}
        c.assign(tps)
        for tp, offset in start.items():
            c.seek(tp, offset)
        held: dict[TopicPartition, deque[ConsumerRecord]] = {tp: deque() for tp in tps}
        positions = dict(start)
        replayed = diverged = 0
        warned = False
        for e in entries:
            records = {}
            for topic, end in e.ends.items():
                tp = by_topic[topic]
                while await c.position(tp) < end:
                    held[tp].extend(await self._fetch(tp))
                q, recs = held[tp], []
                while q and q[0].offset < end:
                    recs.append(q.popleft())
                if recs:
                    records[topic] = recs
                replayed += len(recs)
                positions[tp] = end
            made = digest(task.apply(Batch(records, frozenset(e.beyond), e.now)))
            if made == (e.outputs, e.crc):
                continue
            if outside:
                if not warned:
                    warned = True
                    log.warning("task %s: replayed batches made other outputs than logged, as expected on the %d "
                                "keys whose state was written outside the workers (baseline bootstrap)",
                                task.id, outside)
            else:
                diverged += 1
                log.error("task %s: a replayed batch made %d outputs (crc %08x) where the logged run made %d "
                          "(crc %08x): the engine is not deterministic here (a defect: please report it)",
                          task.id, made[0], made[1], e.outputs, e.crc)
        return positions, replayed, diverged
