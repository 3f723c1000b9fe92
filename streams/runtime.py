"""The stream runtime: one asyncio task owns the group consumer and runs this worker's tasks.

Kafka is the distributed engine: the consumer group hands out tasks (:mod:`.assignor`), each task
restores its state before it processes (:mod:`.restore`), and a task's outputs, batch log, state
and input offsets are committed in one transaction of its own producer, which fences a zombie
owner (:mod:`.commit`). This module is the loop around them: ``getmany`` batches split by task,
commits when due, snapshots now and then, rebalances at a barrier, and what an operator needs to
see (metrics, a catch-up line, one line per broker problem). The tasks themselves are pure
(:mod:`.task`). docs/streams-kafka.md tells what happens on each fault.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import InvalidProducerEpoch, KafkaError, MessageSizeTooLargeError, ProducerFenced
from aiokafka.structs import OffsetAndMetadata

from gpuwarden.contract import Topics
from gpuwarden.deadletter import UnsentLog
from gpuwarden.kafka import start_client
from gpuwarden.outage import recovered, trouble
from gpuwarden.streams.assignor import TaskAssignor
from gpuwarden.streams.batchlog import Entry, Marker, encode_entries, encode_marker
from gpuwarden.streams.commit import TaskProducer
from gpuwarden.streams.dlq import Outbound
from gpuwarden.streams.groups import Group
from gpuwarden.streams.memory import HeapTrim
from gpuwarden.streams.pacing import Pacing
from gpuwarden.streams.progress import is_progress
from gpuwarden.streams.restore import Restorer
from gpuwarden.streams.statewire import MARKER, batchlog_topic, changelog_topic, transactional_id
from gpuwarden.streams.task import Batch, Task, TaskId, digest
from gpuwarden.streams.telemetry import StreamMetrics

log = logging.getLogger("gpuwarden.streams")

#: Quick takeover when a worker dies, yet tolerant of a slow batch (heartbeats run in aiokafka's
#: coordinator task). The broker's group.min.session.timeout.ms (default 6 s) is the floor.
SESSION_TIMEOUT_S = 10.0
HEARTBEAT_INTERVAL_S = 3.0
#: A restore can take a while; past this without a ``getmany`` the member leaves the group.
MAX_POLL_INTERVAL_S = 300.0
#: An input topic created after the group was joined is seen within this (aiokafka's default: 5 min).
METADATA_MAX_AGE_MS = 10_000
#: How long the broker holds a fetch that finds no records (a record that arrives is sent at once):
#: each empty answer decodes every input partition, a millisecond of CPU on a quiet worker. A
#: partition resumed after its restore waits for the fetch in flight, at most this.
FETCH_WAIT_MS = 3000
#: How long aiokafka's fetch routine sleeps when nothing wakes it (its default: 0.2 s). A fetch
#: answer, a drained partition, a seek, a resume and a new assignment wake it anyway; at 0.2 s it
#: walked every input partition five times a second behind a fetch the broker was holding.
FETCHER_IDLE_MS = 5000
#: A transaction holding progress reports (and no output a reader acts on at once) is committed
#: after this, not after ``commit_interval``: stage 2 learns how far stage 1 got within it.
QUIET_COMMIT_S = 5.0
#: A transaction holding only input offsets and the batch log, which no reader waits for, is
#: committed once the task has had no batch for this long, or this long after it opened while
#: batches keep coming: a busy task pays a transaction (five requests) per ``OFFSETS_COMMIT_S``,
#: not per 5 s, and the group's committed offsets reach the end ``OFFSETS_SETTLE_S`` after the
#: last record. A takeover reads again from the committed offsets, as before, only more of them.
OFFSETS_SETTLE_S = 10.0
OFFSETS_COMMIT_S = 30.0
#: Records per ``getmany``, and bytes per partition per fetch: a catch-up decompresses whole
#: fetches (zstd, ~37x), so 1 MiB per partition over 32 partitions gave a worker a 420-480 MiB
#: peak on bench/worker_memory.py's backlog; 128 KiB gave 158 MiB, caught up in 30 s.
MAX_RECORDS = 5000
FETCH_BYTES = 1 << 17
#: A round holds the event loop, where aiokafka's heartbeats run: on a CPU shared at load ~9,
#: 5,000 records took a round 12-22 s, past the 10 s session timeout (the member was thrown out).
#: So a ``getmany`` asks for about this much work at the last rounds' pace (at least MIN_RECORDS).
ROUND_S = 1.0
MIN_RECORDS = 100
#: After a ``getmany`` that returned records, the next one waits this long from it: what arrives
#: meanwhile (the rest of a tick from many agents) comes in one fetch answer and is applied in one
#: round, not in a fetch and a round per arrival (the fetch answers' decoding and the rounds were a
#: live worker's largest cost beside its engine: docs/benchmarks.md, live cost). A record that
#: comes after a quiet spell is fetched at once; one in a stream waits at most this. A round
#: longer than this is not held at all, nor is a fetch while the inputs hold records past it (a
#: catch-up, whose fetch answers are cut at ``FETCH_BYTES`` a partition or paced: ``drained``).
ROUND_GAP_S = 0.2
#: How often a task holding records back for an input behind is settled when nothing comes.
IDLE_S = 1.0
#: With nothing held back, nothing due and no records coming, the loop looks at its tasks this
#: often (positions moved by transaction markers alone, reports due, a new assignment to
#: reconcile), not every ``IDLE_S``: a look at every task is a visible share of a quiet worker's
#: CPU (docs/benchmarks.md, live cost).
QUIET_ROUND_S = 5.0
#: While the inputs have records past what was applied for this long, a catch-up line this often.
PROGRESS_S = 10.0
#: The counts of what was set aside are logged when they change, at most this often.
COUNTS_S = 5.0
#: After a task failed (broker away, fenced), wait this long before restoring it: a zombie that was
#: fenced learns of the rebalance that moved its task meanwhile, instead of fencing the new owner back.
RETRY_S = SESSION_TIMEOUT_S + 1.0


@dataclass
class Active:
    """A task this worker runs: the pure task, its producer, and where its inputs stand."""

    task: Task
    producer: TaskProducer
    positions: dict[TopicPartition, int]  # next offset to apply, per input partition
    committed: dict[TopicPartition, tuple[int, str]]  # what the group's offsets say, as last committed or read
    entries: list[Entry] = field(default_factory=list)  # the open transaction's batches
    opened: float | None = None  # monotonic time the open transaction took its first batch
    due: float = math.inf  # monotonic time the open transaction's outputs are to be committed by
    batched_at: float = -math.inf  # monotonic time it last applied a batch
    since_snapshot: int = 0  # input records since the last snapshot
    batches_since: int = 0
    snapshot_at: float = field(default_factory=time.monotonic)
    idled_at: float = -math.inf
    seq: int = 0
    pacing: Pacing = field(default_factory=Pacing)  # its source inputs read at one pace while behind

    @property
    def tps(self) -> list[TopicPartition]:
        return list(self.positions)

    def due_at(self) -> float:
        """When the open transaction is to be committed: its outputs' deadline, or its input
        offsets' once the inputs settled or it has been open ``OFFSETS_COMMIT_S``."""
        if self.opened is None:
            return math.inf
        return min(self.due, self.opened + OFFSETS_COMMIT_S, self.batched_at + OFFSETS_SETTLE_S)


class Runtime:
    """One worker of the group ``app``: ``run(stop)`` until ``stop`` is set."""

    def __init__(self, *, app: str, client_kw: Mapping[str, object], topics: Topics, groups: Mapping[str, Group],
                 outputs: Iterable[str], limits: Mapping[str, int], factory: Callable[[TaskId], Task],
                 metrics: StreamMetrics, unsent: UnsentLog, commit_s: float, snapshot_s: float,
                 snapshot_records: int) -> None:
        self.app, self.kw, self.topics, self.groups = app, dict(client_kw), topics, groups
        self.outputs = (*outputs, *(changelog_topic(app, t) for g in groups.values() for t in g.tables),
                        *(batchlog_topic(app, g) for g in groups))
        self.limits, self.factory, self.metrics, self.unsent = limits, factory, metrics, unsent
        self.commit_s, self.snapshot_s, self.snapshot_records = commit_s, snapshot_s, snapshot_records
        self.group_of = {t: g.name for g in groups.values() for t in g.inputs}
        #: what agents and collectors write (stamped near event time): the inputs paced while behind.
        #: Not events: a node may have none for hours, and stage 1 holds each node back to its last
        #: event while the events partition has records left (streams/backlog.py), so events paused
        #: for being ahead held every node's samples and metrics (a worker's peak 400+ MiB, not 145)
        self.sources = frozenset((topics.samples, topics.metrics, topics.inference, topics.jobs))
        self.assignor = TaskAssignor({g.name: g.inputs for g in groups.values()})
        self.instance = uuid.uuid4().hex[:12]  # names this process's commits (a kept task is checked by it)
        self.lock = asyncio.Lock()  # a round, a reconcile and the rebalance barrier, one at a time
        self.active: dict[TaskId, Active] = {}
        self.wanted: set[TaskId] | None = None  # a new assignment to reconcile with
        self.assigned = asyncio.Event()  # set with ``wanted``: the loop's wait for records ends at once
        self.revoked = False  # partitions taken away, the new assignment not reconciled yet
        self.waiting: dict[TaskId, float] = {}  # assigned, not running: when to try opening it
        self.trim = HeapTrim()
        self.lagging_since: float | None = None
        self.progress_at = -math.inf
        self.applied = self.applied_at = 0  # input records applied since start (the catch-up line's rate)
        self.lags: dict[TopicPartition, int] = {}
        self.reported: dict[str, int] = {"dead_letters": 0, "unsent": 0}
        self.reported_at = -math.inf
        self.fetched_any = False
        self.drained_at = -math.inf  # monotonic time of the last ``getmany`` that took all there was
        self.fetched_at = -math.inf  # monotonic time the last ``getmany`` returned
        self.max_records = MAX_RECORDS  # records per getmany (``_size_rounds``)
        self.waited = 0.0  # seconds spent waiting for records: pacing's clock (streams/pacing.py)

    # -- the loop ----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        kw = self.kw
        asyncio.get_running_loop().set_exception_handler(_fenced_quietly)
        self.consumer = AIOKafkaConsumer(
            **kw, group_id=self.app, enable_auto_commit=False, isolation_level="read_committed",
            auto_offset_reset="earliest", partition_assignment_strategy=(self.assignor,),
            session_timeout_ms=int(SESSION_TIMEOUT_S * 1000), heartbeat_interval_ms=int(HEARTBEAT_INTERVAL_S * 1000),
            max_poll_interval_ms=int(MAX_POLL_INTERVAL_S * 1000), metadata_max_age_ms=METADATA_MAX_AGE_MS,
            max_partition_fetch_bytes=FETCH_BYTES, fetch_max_wait_ms=FETCH_WAIT_MS,
            consumer_timeout_ms=FETCHER_IDLE_MS)
        reader = AIOKafkaConsumer(**kw, enable_auto_commit=False, isolation_level="read_committed",
                                  auto_offset_reset="earliest", max_partition_fetch_bytes=FETCH_BYTES,
                                  fetch_max_wait_ms=20)  # a restore reads on at once
        self.admin = AIOKafkaAdminClient(**kw)
        await start_client(reader, kw)
        await start_client(self.admin, kw)
        await start_client(self.consumer, kw)
        self.restorer = Restorer(reader, self.app, {g.name: g.tables for g in self.groups.values()})
        self.consumer.subscribe(sorted(self.group_of), listener=_Barrier(self))
        try:
            while not stop.is_set():
                await self._reconcile()
                try:
                    data = await self._fetch()
                except Exception as e:  # noqa: BLE001 - the broker away, a coordinator moving: the loop goes on
                    log.warning("fetch failed: %s", e, extra=trouble("fetch"))
                    await asyncio.sleep(1.0)
                    continue
                if data and not self.fetched_any:  # when the work began (bench/streams_throughput.py times from it)
                    self.fetched_any = True
                    log.info("first fetch: %d records", sum(len(r) for r in data.values()))
                async with self.lock:
                    await self._round(data)
        finally:
            async with self.lock:  # a clean stop: the next owners restore without a replay
                await asyncio.gather(*(self._guard(a, self._commit(a, snapshot=a.batches_since > 0))
                                       for a in list(self.active.values())))
                for tid in list(self.active):
                    await self._close(tid)
            for client in (self.consumer, reader, self.admin):  # outside the lock: a rebalance callback may wait for it
                try:
                    await asyncio.wait_for(client.stop() if hasattr(client, "stop") else client.close(), 15)
                except Exception as e:  # noqa: BLE001
                    log.warning("closing a Kafka client: %s", e, extra=trouble("close"))

    async def _fetch(self) -> Mapping[TopicPartition, list]:
        """``getmany``, cut short by a new assignment (reconciled now, not when the wait ends).
        Cancelled while it waits, ``getmany`` has drained nothing (it drains and returns without
        awaiting); one that finished meanwhile gives its records."""
        gap = self.drained_at + ROUND_GAP_S - time.monotonic()
        if gap > 0:
            await asyncio.sleep(gap)
        began = time.monotonic()
        fetch = asyncio.ensure_future(self.consumer.getmany(timeout_ms=self._wait_ms(), max_records=self.max_records))
        woken = asyncio.ensure_future(self.assigned.wait())
        try:
            await asyncio.wait((fetch, woken), return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
        if not fetch.done():
            fetch.cancel()
            await asyncio.wait((fetch,))
        self.waited += time.monotonic() - began
        self.fetched_at = time.monotonic()
        return {} if fetch.cancelled() else fetch.result()

    def _wait_ms(self) -> int:
        """How long the next fetch may wait for records: until the next commit due, the next
        task to open, or the next settle step of a task holding records back."""
        now = time.monotonic()
        idle = IDLE_S if any(a.task.holding() for a in self.active.values()) else QUIET_ROUND_S
        due = min([idle, *(a.due_at() - now for a in self.active.values()), *(w - now for w in self.waiting.values())])
        return max(5, int(due * 1000))

    async def _round(self, data: Mapping[TopicPartition, list]) -> None:
        """One ``getmany``'s records, each task's as one batch; then reports and due commits.
        Between a revocation and the next reconcile nothing is applied (the records fetched before
        it are read again from the tasks' positions)."""
        if self.revoked:
            return
        now, wall, c = time.time(), time.monotonic(), self.consumer
        ends = {tp: await c.position(tp) for a in self.active.values() for tp in a.tps}
        n = sum(len(r) for r in data.values())
        if drained(n, self.max_records, ends, c.last_stable_offset):
            self.drained_at = self.fetched_at
        await self._check_deleted(data, ends)
        due = []
        for a in self.active.values():
            records = {tp.topic: data[tp] for tp in a.tps if tp in data}
            moved = bool(records) or any(ends[tp] != a.positions[tp] for tp in a.tps)
            # a task's first batch, empty or not, says whether its inputs hold a backlog before
            # it reports progress: a report sent before would call a partition empty and open
            # the gates of stage 2 and of the allocation join over records not read yet
            fresh = a.batched_at == -math.inf
            if moved or fresh or (a.task.holding() and wall - a.idled_at >= IDLE_S):
                due.append((a, records))
        batched = {a.task.id for a, _ in due}
        paced = [a for a in self.active.values() if a.task.id in batched or a.pacing.paused]
        highs = await self._highs([tp for a in paced for tp in a.tps]) if paced else {}
        for a, records in due:
            beyond = frozenset(tp.topic for tp in a.tps if highs.get(tp, math.inf) > ends[tp])
            await self._guard(a, self._batch(a, records, beyond, ends, now, wall))
        for a in paced:
            self._pace(a, data, highs, ends, self.waited)
        for a in list(self.active.values()):
            if a.task.id not in batched:
                await self._guard(a, self._send(a, a.task.reports(wall)))
            if wall >= a.due_at():
                await self._guard(a, self._commit(a, snapshot=self._snapshot_due(a, wall)))
        lags = self._lags(highs, ends)
        self.lags.update(lags)
        self._progress(lags, wall)
        self.metrics.refresh(self.lags, [r for a in self.active.values() for r in a.task.tables.values()],
                             self.unsent, [a.task for a in self.active.values()])
        self._report_counts(wall)
        self._size_rounds(n, time.monotonic() - wall)
        self.trim.busy(n)
        if not n:
            self.trim.idle()

    async def _batch(self, a: Active, records: dict[str, list], beyond: frozenset[str],
                     ends: Mapping[TopicPartition, int], now: float, wall: float) -> None:
        out = a.task.apply(Batch(records, beyond, now))
        n, crc = digest(out)
        a.entries.append(Entry({tp.topic: ends[tp] for tp in a.tps if ends[tp] != a.positions[tp]},
                               tuple(sorted(beyond)), now, n, crc))
        a.positions.update({tp: ends[tp] for tp in a.tps})
        count = sum(len(r) for r in records.values())
        a.since_snapshot += count
        a.batches_since += 1
        self.applied += count
        self.metrics.fetched(records)
        if not count:
            a.idled_at = wall
        a.batched_at = wall
        self._due_in(a, math.inf)  # opens the transaction; its offsets are due by ``due_at``
        await self._send(a, out + a.task.reports(wall))

    async def _send(self, a: Active, out: list[Outbound]) -> None:
        fit = []
        for o in out:
            if a.producer.fits(o):
                fit.append(o)
            else:
                self.unsent.record(o.topic, o.key, o.value, MessageSizeTooLargeError(
                    f"{len(o.value)} bytes, over {o.topic}'s max.message.bytes even compressed: kept here, not sent"))
        if not fit:
            return
        a.producer.hold(fit)
        alerts = [o for o in fit if o.topic == self.topics.alerts]
        if alerts:  # a transition: readers see it at once
            self._due_in(a, -math.inf)
            self.metrics.produced(json.loads(o.value) for o in alerts)
        else:
            self._due_in(a, self.commit_s if any(not is_progress(o.headers) for o in fit) else QUIET_COMMIT_S)

    def _size_rounds(self, n: int, took: float) -> None:
        """The next ``getmany``'s records: about ``ROUND_S`` of work at this round's pace, learnt
        from a round that took all it was allowed or ran long."""
        if n >= self.max_records or took > ROUND_S:
            self.max_records = max(MIN_RECORDS, min(MAX_RECORDS, int(n * ROUND_S / max(took, 1e-3))))

    def _pace(self, a: Active, data: Mapping[TopicPartition, list], highs: Mapping[TopicPartition, int],
              ends: Mapping[TopicPartition, int], waited: float) -> None:
        """Pause the task's source inputs that ran ahead in time of one still behind; resume them
        when it caught up (streams/pacing.py). Inputs a worker writes are stamped when written,
        not in event time, so only the agents' and collectors' topics are paced."""
        if self.active.get(a.task.id) is not a:
            return
        sources = [tp for tp in a.tps if tp.topic in self.sources]
        a.pacing.read({tp: data[tp] for tp in sources if tp in data})
        pause, resume = a.pacing.plan([tp for tp in sources if highs.get(tp, math.inf) > ends[tp]], waited)
        if pause:
            self._pause(pause)
        if resume:
            self.consumer.resume(*resume)

    def _due_in(self, a: Active, seconds: float) -> None:
        """The open transaction (opened now if none) is committed at most ``seconds`` after it opened."""
        if a.opened is None:
            a.opened = time.monotonic()
        a.due = min(a.due, a.opened + seconds)

    def _snapshot_due(self, a: Active, wall: float) -> bool:
        return a.since_snapshot >= self.snapshot_records or a.batches_since >= self.snapshot_records or \
            (a.batches_since > 0 and wall - a.snapshot_at >= self.snapshot_s)

    async def _commit(self, a: Active, snapshot: bool = False) -> None:
        """The open transaction with the batch log (and, for a snapshot, the changed keys'
        envelopes and the marker) and the input offsets; nothing to do if nothing is open."""
        if not (snapshot or a.entries or a.producer.open):
            return
        tid, p = a.task.id, a.task.id.partition
        if a.entries or snapshot:
            sent = await a.producer.send([Outbound(batchlog_topic(self.app, tid.group), str(tid).encode(),
                                                   encode_entries(a.entries), partition=p)])
        if snapshot:
            log_at = (await sent[0]).offset + 1
            state = [Outbound(changelog_topic(self.app, table), key.encode(), envelope, partition=p)
                     for table, runner in a.task.tables.items() for key, envelope in runner.snapshot().items()]
            marker = Marker({tp.topic: o for tp, o in a.positions.items()}, log_at, a.task.dump())
            first = self.groups[tid.group].tables[0]
            a.producer.hold([*state, Outbound(changelog_topic(self.app, first), MARKER, encode_marker(marker),
                                              partition=p)])
        a.seq += 1
        meta = f"{self.instance}:{a.seq}"
        offsets = {tp: OffsetAndMetadata(o, meta) for tp, o in a.positions.items()}
        await a.producer.commit(offsets, self.app)
        a.committed = {tp: (o, meta) for tp, o in a.positions.items()}
        a.entries, a.opened, a.due = [], None, math.inf
        if snapshot:
            a.since_snapshot = a.batches_since = 0
            a.snapshot_at = time.monotonic()
        self.metrics.committed()
        recovered("a transaction committed")  # the broker answered: the outage, if any, is over

    async def _guard(self, a: Active, step: "asyncio.Future[None] | object") -> None:
        """Run one step of a task; a failure (broker away, the task fenced by a new owner, a
        defect) ends the task here: its state is dropped, and it is restored later from what
        was committed."""
        try:
            await step  # type: ignore[misc]
        except Exception as e:  # noqa: BLE001
            tid = a.task.id
            if self.active.get(tid) is not a:
                return
            name = type(e).__name__
            fenced = isinstance(e, (ProducerFenced, InvalidProducerEpoch))
            kafka = not fenced and isinstance(e, (KafkaError, asyncio.TimeoutError, OSError))
            (log.warning if fenced or kafka else log.exception)(
                "task %s stopped (%s: %s); it is restored from what was committed in %g s", tid, name, e, RETRY_S,
                extra=trouble("task stopped") if kafka else None)
            if a.producer.open:  # what it had sent since its last commit is aborted (by the next fence at the latest)
                self.metrics.transactions.labels("aborted").inc()
            await self._close(tid)
            self.waiting[tid] = time.monotonic() + RETRY_S
            self._pause(a.tps)

    # -- assignment --------------------------------------------------------------------------

    async def revoke(self) -> None:
        """The rebalance barrier's first half: every open transaction committed, then nothing
        applied until the new assignment is reconciled."""
        async with self.lock:
            await asyncio.gather(*(self._guard(a, self._commit(a)) for a in list(self.active.values())))
            self.revoked = True

    def _pause(self, tps: Iterable[TopicPartition]) -> None:
        assigned = self.consumer.assignment()
        self.consumer.pause(*(tp for tp in tps if tp in assigned))

    def tasks_of(self, partitions: Iterable[TopicPartition]) -> set[TaskId]:
        return {TaskId(self.group_of[tp.topic], tp.partition) for tp in partitions if tp.topic in self.group_of}

    async def _reconcile(self) -> None:
        """Bring the running tasks in line with the assignment: close those gone, check those
        kept (nobody committed for them meanwhile), restore those new or failed."""
        now = time.monotonic()
        if self.wanted is None and not any(t <= now for t in self.waiting.values()):
            return
        async with self.lock:
            if self.wanted is not None:
                wanted, self.wanted, self.revoked = self.wanted, None, False
                self.assigned.clear()
                for tid in set(self.active) - wanted:
                    await self._close(tid)
                self.waiting = {t: w for t, w in self.waiting.items() if t in wanted}
                kept = [self.active[t] for t in sorted(set(self.active) & wanted)]
                if kept:
                    await self._check_kept(kept)
                for tid in wanted - set(self.active):
                    self.waiting.setdefault(tid, now)
            for tid in sorted(t for t, w in self.waiting.items() if w <= now):
                try:
                    await self._open(tid)
                    del self.waiting[tid]
                except Exception as e:  # noqa: BLE001 - the broker away: try again later
                    log.warning("task %s not restored now (%s: %s); trying again in %g s", tid, type(e).__name__, e,
                                RETRY_S, extra=trouble("restore"))
                    self.waiting[tid] = time.monotonic() + RETRY_S
            self.assignor.owned = set(self.active)

    async def _check_kept(self, kept: list[Active]) -> None:
        try:
            committed = await self.admin.list_consumer_group_offsets(
                self.app, partitions=[tp for a in kept for tp in a.tps])
        except Exception as e:  # noqa: BLE001
            log.warning("committed offsets not read (%s): the kept tasks are restored", e, extra=trouble("offsets"))
            committed = {}
        for a in kept:
            now = {tp: (o.offset, o.metadata) for tp in a.tps if (o := committed.get(tp)) and o.offset >= 0}
            if now == a.committed:
                for tp, o in a.positions.items():
                    self.consumer.seek(tp, o)
                continue
            log.info("task %s: committed by another worker meanwhile: restored", a.task.id)
            await self._close(a.task.id)
            self.waiting[a.task.id] = time.monotonic()

    async def _open(self, tid: TaskId) -> None:
        """Fence the task's earlier producers, then restore it and seek its inputs."""
        task = self.factory(tid)
        producer = TaskProducer(self.kw, transactional_id(self.app, tid), self.outputs, self.limits)
        self.metrics.restoring.inc()
        try:
            await producer.start()
            tps = [TopicPartition(t, tid.partition) for t in task.inputs]
            got = await self.admin.list_consumer_group_offsets(self.app, partitions=tps)
            committed = {tp: (o.offset, o.metadata) for tp, o in got.items() if o.offset >= 0}
            done = await self.restorer.restore(task, {tp: o for tp, (o, _) in committed.items()})
            for tp, o in done.positions.items():  # fails if a rebalance took the partition meanwhile
                self.consumer.seek(tp, o)
            self.consumer.resume(*tps)
        except BaseException:
            await _quietly(producer.stop())
            raise
        finally:
            self.metrics.restoring.dec()
        a = self.active[tid] = Active(task, producer, done.positions, committed)
        self.metrics.restored(done.seconds, done.replayed, done.diverged)
        log.info("task %s: %d keys restored, %d batches (%d records) replayed in %.2f s%s", tid, done.keys,
                 done.batches, done.replayed, done.seconds, f", {done.diverged} DIVERGED" if done.diverged else "")
        if not done.marker:  # the first snapshot: every later batch log has one to start from
            await self._commit(a, snapshot=True)

    async def _close(self, tid: TaskId) -> None:
        a = self.active.pop(tid, None)
        if a is not None:
            for tp in a.tps:
                self.lags.pop(tp, None)
            await _quietly(a.producer.stop())

    async def _highs(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """The inputs' end offsets (last stable: what a reader gets), as the latest fetch answer
        for each partition gave them (no request of its own per round); the broker is asked only
        for partitions no fetch has answered yet. Those it cannot say are left out (they count as
        behind)."""
        highs = {tp: o for tp in tps if (o := self.consumer.last_stable_offset(tp)) is not None}
        unknown = [tp for tp in tps if tp not in highs]
        if not unknown:
            return highs
        try:
            highs.update(await self.restorer.consumer.end_offsets(unknown))
        except Exception as e:  # noqa: BLE001
            log.info("end offsets not read (%s): inputs count as behind", e)
            return highs
        recovered("end offsets read")
        return highs

    # -- what an operator sees ---------------------------------------------------------------

    def describe(self) -> list[str]:
        """A line per task: where its inputs stand against the broker (SIGUSR1, with the stacks)."""
        out = [f"revoked={self.revoked} wanted={self.wanted} waiting={sorted(map(str, self.waiting))}"]
        paused = self.consumer.paused()
        for tid, a in sorted(self.active.items()):
            parts = ", ".join(f"{tp.topic.rsplit('.', 2)[-2]}.{tp.topic.rsplit('.', 1)[-1]}:{o}"
                              f"(lag {self.lags.get(tp, '?')}{', paused' if tp in paused else ''})"
                              for tp, o in a.positions.items())
            out.append(f"task {tid}: holding={a.task.holding()} open={a.opened is not None} {parts}")
        return out

    async def _check_deleted(self, data: Mapping[TopicPartition, list], ends: Mapping[TopicPartition, int]) -> None:
        """Records the broker deleted (retention, delete-records) before this worker read them:
        aiokafka moves the position past them to the log's start and says so only at INFO. An
        input whose next record (or position) is past the one expected is checked against the
        log's start offset; a gap of transaction markers or aborted records is not a loss."""
        gaps = {tp: (want, got) for a in self.active.values() for tp, want in a.positions.items()
                if (got := data[tp][0].offset if data.get(tp) else ends[tp]) > want}
        if not gaps:
            return
        try:
            starts = await self.restorer.consumer.beginning_offsets(list(gaps))
        except Exception as e:  # noqa: BLE001
            log.info("log start offsets not read (%s): records deleted unread are not looked for now", e)
            return
        for tp, (want, got) in gaps.items():
            lost = min(starts.get(tp, want), got) - want
            if lost > 0:
                log.warning("%s partition %d: %d records deleted by the broker before this worker read them "
                            "(offsets %d-%d; retention or delete-records): alerts they would have raised are "
                            "missing", tp.topic, tp.partition, lost, want, want + lost - 1)
                self.metrics.deleted_unread.labels(tp.topic, str(tp.partition)).inc(lost)

    def _report_counts(self, wall: float) -> None:
        """What was set aside (dead letters, letters the broker refused, fields a newer writer
        sends), logged when it changed, at most every ``COUNTS_S``."""
        if wall - self.reported_at < COUNTS_S:
            return
        runners = [r for a in self.active.values() for r in a.task.tables.values()]
        counts = {"dead_letters": sum(r.dead for r in runners), "unsent": self.unsent.count,
                  **{f"unknown {t} {f}": n for r in runners for (t, f), n in sorted(r.unknown.items())}}
        if counts != self.reported:
            log.warning("counts: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
            self.reported, self.reported_at = counts, wall

    def _lags(self, highs: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        return {tp: max(0, h - ends[tp]) for tp, h in highs.items() if tp in ends}

    def _progress(self, lags: Mapping[TopicPartition, int], wall: float) -> None:
        """While the inputs stay behind: a line every ``PROGRESS_S`` with the lag, rate and ETA."""
        if not lags:
            return
        lag = sum(lags.values())
        if lag == 0:
            self.lagging_since = None
            return
        if self.lagging_since is None:
            self.lagging_since, self.progress_at, self.applied_at = wall, wall, self.applied
            return
        if wall - self.progress_at >= PROGRESS_S:
            rate = (self.applied - self.applied_at) / max(wall - self.progress_at, 1e-9)
            eta = f"{lag / rate:,.0f} s" if rate > 0 else "unknown"
            log.warning("catching up: %s records behind, %s records/s, done in %s", f"{lag:,}", f"{rate:,.0f}", eta)
            self.progress_at, self.applied_at = wall, self.applied


def drained(n: int, asked: int, positions: Mapping[TopicPartition, int],
            stable: Callable[[TopicPartition], int | None]) -> bool:
    """Whether a ``getmany`` that returned ``n`` records of ``asked`` took all the inputs held:
    some records, fewer than asked, and no input's last stable offset (as its latest fetch
    answer gave it; None when none has) past the consumer's position. A short answer with records
    left behind it is a catch-up's (cut at ``FETCH_BYTES`` a partition, or paced), and the next
    fetch is not held for ``ROUND_GAP_S``: those holds were 2-5 s of a 2 h backlog's 31-41 s catch-up
    (bench/worker_memory.py, docs/benchmarks.md)."""
    if not 0 < n < asked:
        return False
    return not any((end := stable(tp)) is not None and end > at for tp, at in positions.items())


class _Barrier(ConsumerRebalanceListener):  # type: ignore[misc]
    """The rebalance barrier: before the group takes partitions away, every open transaction is
    committed (the loop is held by the lock meanwhile); the new assignment is reconciled by the
    loop before its next fetch, and its partitions wait, paused, until their task is restored."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self.rt.revoke()

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        rt = self.rt
        rt.wanted = rt.tasks_of(assigned)
        rt.assigned.set()
        rt.consumer.pause(*(tp for tp in assigned if TaskId(rt.group_of[tp.topic], tp.partition) not in rt.active))


def _fenced_quietly(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """asyncio's ERROR about what a producer that already failed for good leaves behind inside
    aiokafka is dropped; the task it served was stopped, said so in one line and is restored:

    - a fenced producer fails every send it still held, futures nobody awaits;
    - a batch whose send failed retriably is put back after a back-off, and if the producer failed
      for good meanwhile (its pending batches failed and forgotten) that raises ``KeyError`` in
      aiokafka's sender task, which nobody awaits any more (aio-libs/aiokafka PR #831: the same
      error for an aborted producer). Seen on a zombie woken after its tasks moved.
    """
    exc = context.get("exception")
    unretrieved = str(context.get("message", "")).endswith("exception was never retrieved")
    if unretrieved and (isinstance(exc, (ProducerFenced, InvalidProducerEpoch)) or
                        isinstance(exc, KeyError) and _coroutine_name(context.get("future")) == SENDER_RETRY):
        log.debug("left behind by a producer that failed for good: %r", exc)
        return
    loop.default_exception_handler(context)


#: The qualified name of aiokafka's coroutine that puts a batch back after a retriable error (a name
#: of its internals, only read: if it changes, the ERROR is logged again and the kill tests say so).
SENDER_RETRY = "Sender._send_produce_req"


def _coroutine_name(future: object) -> str | None:
    coro = future.get_coro() if isinstance(future, asyncio.Task) else None
    return getattr(coro, "__qualname__", None)


async def _quietly(step: object) -> None:
    try:
        await step  # type: ignore[misc]
    except Exception as e:  # noqa: BLE001 - closing what failed: the next owner's fence settles the rest
        log.debug("closing: %s", e)
