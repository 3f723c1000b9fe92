"""The faust topology: two keyed stages over Kafka, state in changelog tables.

Stage 1 (key node) reads ``gpu.samples``, ``gpu.events`` and ``task.metrics`` (one batch of a
node's task metrics per tick, applied item by item; all keyed by node, so co-partitioned), runs :class:`gpuwarden.streams.engine.NodeStage`,
and produces transitions to ``alerts`` (key fingerprint) and task summaries to
``task.summaries`` (key task class: the repartition for stage 2), each batch's summaries
followed by progress reports to every partition (:mod:`gpuwarden.streams.progress`). Stage 2
(key task class) reads ``task.summaries`` and runs :class:`gpuwarden.streams.engine.ClassStage`
for the per-class baselines, releasing a class's summaries once every stage-1 partition has
passed them. The inference stage (key node, #20) reads ``inference.metrics`` through its own
runner (:mod:`gpuwarden.streams.inferencewire`) and produces to ``alerts`` and its services'
minutes of SLO events to ``inference.sli`` (key service), with progress reports behind them; the
service stage (key service) reads ``inference.sli``, gated by those reports as stage 2 is by
stage 1's, and judges each service's SLO over all its nodes. The scheduler stage
(key cluster, :class:`gpuwarden.streams.schedstage.SchedulerStage`, its runner in
:mod:`gpuwarden.streams.schedrunner`, #19) reads ``scheduler.jobs`` and sends job allocations on
``scheduler.allocations`` (key node), which stage 1 reads with its other inputs. Each stage keeps a
faust Table (compacted changelog)
of per-key envelopes (see :mod:`gpuwarden.streams.keyed`), written for the keys that changed
every ``engine.checkpoint_interval`` of wall time; input events are acknowledged
(so committed by faust) only after the checkpoint that covers them is on the broker.

faust is driven through its public API only: one agent over the input topics
takes batches of events with ``Stream.noack_take`` (values stay raw bytes, no faust
Record), acknowledges them with ``Stream.ack`` after their checkpoint, writes the
tables with ``Table.send_changelog`` (awaited: the envelopes are on the broker before the
events are acknowledged), and sends outputs with ``Topic.send``. See docs/streams-faust.md.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any, Protocol

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.partitioner import DefaultPartitioner
from faust.exceptions import ConsumerNotStarted
from faust.types import TP, EventT, Message, StreamT

from gpuwarden.contract import (
    AlertTransition,
    GpuEvent,
    JobAllocation,
    NodeSnapshot,
    StageProgress,
    TaskMetrics,
    TaskSummary,
    Topics,
    encode,
)
from gpuwarden.deadletter import UnsentLog
from gpuwarden.kafka import KafkaConnectError, broker_credentials, kafka_kwargs, start_client
from gpuwarden.streams.backlog import Backlog
from gpuwarden.streams.config import StreamsSettings
from gpuwarden.streams.dlq import Consumed, Limits, Outbound, salvage_inbound
from gpuwarden.streams.engine import StageOutput
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.inferencewire import SERVICE_TABLE, ServiceGates, SliProgress, inference_runner
from gpuwarden.streams.inferencewire import TABLE as INFERENCE_TABLE
from gpuwarden.streams.keyed import KeyedRunner, Settle, Source
from gpuwarden.streams.outputsender import OutputSender
from gpuwarden.streams.progress import HEADERS as PROGRESS_HEADERS
from gpuwarden.streams.progress import Gate, Reporter, is_progress, partition_watermark, read_reports
from gpuwarden.streams.readorder import ReadOrder
from gpuwarden.streams.runtime import HeapTrim
from gpuwarden.streams.schedrunner import scheduler_runner  # scheduler stage (#19)
from gpuwarden.streams.schedstage import SchedulerStage  # scheduler stage (#19)
from gpuwarden.streams.servicestage import ServiceStage
from gpuwarden.streams.statewire import partition_of
from gpuwarden.streams.telemetry import StreamMetrics

log = logging.getLogger("gpuwarden.streams")

#: Quick takeover when a worker dies, yet tolerant of a slow batch (heartbeats
#: run on the same event loop). The broker's group.min.session.timeout.ms
#: (default 6 s) is the floor.
SESSION_TIMEOUT_S = 10.0
HEARTBEAT_INTERVAL_S = 2.0
#: How often the consumer refreshes its metadata (aiokafka's default: 5 min). An input topic that
#: did not exist when the group was joined (a worker creates the ones missing at its start) is
#: assigned to nobody until a refresh shows it: the failover test's scheduler topics went unread
#: for a whole run ("Ignoring missing topic" at every assignment, 16 s after they were created).
CONSUMER_METADATA_MAX_AGE_MS = 10_000
COMMIT_INTERVAL_S = 1.0
#: Events held unacknowledged for the next checkpoint before one is forced (bounds
#: what a takeover reads again, and the events a worker holds).
HOLD_MAX = 20000
#: Producer, changelog-topic and DLQ-topic record size limit: a busy node's state envelope
#: is ~200 kB compressed, above a few hundred kB faust's 1 MB default gets close; a dead
#: letter holds a record of up to ``limits.max_record_bytes`` (≤ 8 MiB) in base64.
MAX_RECORD_BYTES = 16 << 20
#: The workers' outputs (dead letters holding base64 JSON: ~4x smaller) are compressed.
COMPRESSION = "zstd"
#: Per-partition fetch size. A batch's records are merged by their Kafka timestamps,
#: but one topic's fetch can run ahead of another's while catching up on a backlog;
#: small fetches bound how far (see docs/streams-faust.md).
FETCH_BYTES = 4 << 20
#: ``Stream.noack_take``: a batch is this many events, or what came within ``TAKE_WITHIN_S``.
TAKE_MAX = 8192
TAKE_WITHIN_S = 0.25
#: faust's per-stream queue between its fetch loop and the agent (faust's default: 4,096).
STREAM_BUFFER = 2 * TAKE_MAX
#: How often nodes held back by an input judged behind are judged again when nothing comes.
IDLE_S = 1.0
#: How often the idle tick asks the broker's end offsets for input partitions that stalled.
STALL_CHECK_S = 5.0
#: The scheduler stage's table (#19), key cluster.
SCHED_TABLE = "scheduler-state"


class NodeStageT(Protocol):
    """Stage 1's interface (``gpuwarden.streams.engine.NodeStage``)."""

    def process(self, record: Any, behind: frozenset[int] | set[int], out: StageOutput, /) -> Any: ...
    def advance(self, node: str, behind: frozenset[int], out: StageOutput, /) -> bool: ...
    def position(self, node: str, /) -> tuple[float, float] | None: ...
    def dump(self, key: str, /) -> bytes: ...
    def load(self, key: str, data: bytes, /) -> None: ...
    def drop(self, key: str, /) -> None: ...
    def allocations(self) -> list[tuple[str, Any]]: ...  # what the worker's metrics read (streams/stageseries.py)
    gate: Any  # the scheduler watermark of the partition being handed over (streams/progress.py)


class ClassStageT(Protocol):
    """Stage 2's interface (``gpuwarden.streams.engine.ClassStage``)."""

    def process(self, summary: TaskSummary, gate: float, /) -> list[AlertTransition]: ...
    def release(self, task_class: str, gate: float, /) -> list[AlertTransition]: ...
    def dump(self, key: str, /) -> bytes: ...
    def load(self, key: str, data: bytes, /) -> None: ...
    def drop(self, key: str, /) -> None: ...
    # what the worker's metrics read (streams/telemetry.py)
    def classes(self) -> list[str]: ...
    def baseline(self, task_class: str, /) -> Mapping[str, Any]: ...
    def latest(self, task_class: str, /) -> Mapping[str, float]: ...


def app_id(settings: StreamsSettings) -> str:
    """One consumer group per fleet: workers with the same id share the partitions."""
    return f"{settings.kafka.topic_prefix}{settings.kafka.client_id}-streams"


def default_stages(settings: StreamsSettings) -> tuple[NodeStageT, ClassStageT]:
    """The real engine stages, with the rules named in the config (else the default pack)."""
    from gpuwarden.streams.engine import ClassStage, NodeStage
    from gpuwarden.streams.rules import load_rules

    rules = load_rules(settings.engine.rules)
    return NodeStage(rules, settings.engine, settings.limits.max_past_skew), ClassStage(rules, settings.engine)


class Topology:
    """One stream worker: the faust app, its tables and agent, and the state they share.

    ``app`` is what a faust Worker runs. Stage 1's records of one batch are merged by Kafka
    timestamp (the order agents sent them) and applied, then stage 2's; events are acked
    after the checkpoint that covers them.
    """

    def __init__(self, settings: StreamsSettings, *, worker_id: str, data_dir: Path,
                 node_stage: NodeStageT | None = None, class_stage: ClassStageT | None = None,
                 metrics: StreamMetrics | None = None) -> None:
        if node_stage is None or class_stage is None:
            node_stage, class_stage = default_stages(settings)
        self.node_stage, self.class_stage = node_stage, class_stage
        self.inference_stage = InferenceStage(settings.engine)
        self.service_stage = ServiceStage(settings.engine)
        self.metrics = metrics or StreamMetrics()  # where the worker counts what it does (streams/telemetry.py)
        k = self.kafka = settings.kafka
        self.offsets: AIOKafkaConsumer | None = None  # see _offsets_client
        # outputs through a producer of the worker's own (streams/outputsender.py: why not faust's)
        self.sender = OutputSender({**kafka_kwargs(k), "client_id": f"{k.client_id}-{worker_id}-outputs"},
                                   compression=COMPRESSION, max_request_size=MAX_RECORD_BYTES)
        self.partitions = k.partitions
        self.topics = topics = Topics(k.topic_prefix)
        self.limits = Limits.of(settings)
        self.unsent = UnsentLog(data_dir / "unsent.jsonl")
        self.app = app = faust.App(
            app_id(settings),
            broker=[f"kafka://{h.strip()}" for h in k.bootstrap.split(",") if h.strip()],
            broker_credentials=broker_credentials(k),
            broker_client_id=f"{k.client_id}-{worker_id}",
            datadir=str(data_dir),
            store="memory://",
            topic_partitions=k.partitions,
            topic_replication_factor=k.replication_factor,
            processing_guarantee="at_least_once",
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=SESSION_TIMEOUT_S,
            broker_heartbeat_interval=HEARTBEAT_INTERVAL_S,
            consumer_metadata_max_age_ms=CONSUMER_METADATA_MAX_AGE_MS,
            broker_commit_interval=COMMIT_INTERVAL_S,
            table_standby_replicas=0,
            producer_acks=-1,
            producer_max_request_size=MAX_RECORD_BYTES,
            producer_compression_type=COMPRESSION,
            consumer_max_fetch_size=FETCH_BYTES,
            stream_buffer_maxsize=STREAM_BUFFER,
            # Events are held unacknowledged until their checkpoint: a rebalance must not wait
            # for them (faust's default waits for every unacked event before it revokes).
            stream_wait_empty=False,
            web_enabled=False,
            autodiscover=False,
        )

        big = {"max.message.bytes": str(MAX_RECORD_BYTES)}  # changelogs and dead-letter topics
        self.outputs: dict[str, faust.TopicT] = {
            **{name: self._raw_topic(name) for name in (topics.alerts, topics.summaries, topics.allocations,
                                                        topics.sli)},
            **{name: self._raw_topic(name, config=big)
               for name in (Topics.dlq(t) for t in (topics.samples, topics.events, topics.metrics,
                                                    topics.summaries, topics.inference, topics.sli,
                                                    topics.jobs, topics.allocations))},
        }
        # bytes key and value types make faust use the raw codec both ways (a ``schema`` alone
        # leaves recovery decoding JSON). A key's changelog partition is its source records'
        # (see ``_partition``; ``use_partitioner``: no current event needed).
        self.node_table, self.class_table, self.inference_table, self.sched_table, self.service_table = (
            app.Table(name, default=None, partitions=k.partitions, use_partitioner=True,
                      key_type=bytes, value_type=bytes, extra_topic_configs=big)
            for name in ("node-state", "class-state", INFERENCE_TABLE, SCHED_TABLE, SERVICE_TABLE))
        #: Per table, the size of each key's last stored envelope (the worker's state size metric).
        self.stored: dict[str, dict[str, int]] = {"node-state": {}, "class-state": {}, INFERENCE_TABLE: {},
                                                  SCHED_TABLE: {}, SERVICE_TABLE: {}}
        self.declaring: asyncio.Future[Any] | None = None
        self.partitioner = DefaultPartitioner()
        self.all_partitions = list(range(k.partitions))

        self.ranks = {topics.samples: 0, topics.events: 1, topics.metrics: 2}
        # scheduler stage (#19): job allocations are a stage-1 input too, but never hold a node
        # back (they come through the scheduler stage; one behind the samples applies on arrival).
        self.node_inputs = {*self.ranks, topics.allocations}
        self.backlog = Backlog(self.ranks)
        self.scratch = StageOutput([], [])  # one per worker: a new one per record cost ~4 % of its CPU
        self.nodes_at: defaultdict[int, set[str]] = defaultdict(set)  # partition -> nodes read from it
        #: Where reading (re)started per assigned input partition: its committed offset, or the
        #: partition's beginning when nothing is committed yet.
        self.start_at: dict[TP, int] = {}
        self.order = ReadOrder()  # per input partition, the next offset to apply
        #: The partitions held through every generation since their keys were last synced, and
        #: the generation that was booked last (see :meth:`book_assignment`).
        self.held_through: set[TP] = set()
        self.booked_generation = -1
        self.kept: set[TP] = set()  # the partitions the last booking kept
        #: Per table: the events its next checkpoint covers, acknowledged once it is stored.
        self.held: dict[str, list[EventT]] = {"node-state": [], "class-state": [], INFERENCE_TABLE: [],
                                              SCHED_TABLE: [], SERVICE_TABLE: []}
        self.stream: StreamT | None = None
        self.lock = asyncio.Lock()  # a batch and the idle timer, one at a time
        self.generation = -1  # the generation whose first batch was logged
        self.batches = 0  # batches since the last idle tick
        self.stall_checked_at = float("-inf")  # when stalled input partitions were last looked for
        self.trim = HeapTrim()
        self.reported: dict[str, int] = {}
        self.reported_at = float("-inf")
        self.reporter = Reporter(float(settings.engine.summary_interval))
        self.reported_all_at = float("-inf")  # when partitions no batch brought were last reported
        self.lateness = float(settings.engine.summary_lateness)
        self.max_source_skew = float(settings.engine.max_source_skew)
        self.gates: dict[int, Gate] = {}  # task.summaries partition -> the watermark read on it
        # scheduler stage (#19) -> stage 1: its progress per scheduler.jobs partition, read on each
        # scheduler.allocations partition (the allocation join waits for it, streams/progress.py)
        self.sched_reporter = Reporter(float(settings.engine.eval_interval))
        self.sched_gates: dict[int, Gate] = {}
        self.class_at: dict[str, int] = {}  # task class -> its task.summaries partition

        self.node_runner = KeyedRunner(node_stage, {
            topics.samples: Source(NodeSnapshot, _node_of, Topics.dlq(topics.samples)),
            topics.events: Source(GpuEvent, _node_of, Topics.dlq(topics.events)),
            topics.metrics: Source(TaskMetrics, _node_of, Topics.dlq(topics.metrics),  # batches (one per tick)
                                   unpack=TaskMetrics.unpack, salvage=salvage_inbound),
            topics.allocations: Source(JobAllocation, _node_of, Topics.dlq(topics.allocations)),  # scheduler stage (#19)
        }, self._emit_node, self.limits, float(settings.engine.checkpoint_interval))
        self.class_runner = KeyedRunner(class_stage, {
            topics.summaries: Source(TaskSummary, _class_of, Topics.dlq(topics.summaries)),
        }, self._emit_class, self.limits, float(settings.engine.checkpoint_interval))
        self.sli_progress = SliProgress(self.inference_stage, lambda node: self.infer_runner.synced(node), topics.sli,
                                        k.partitions, self.lateness, float(settings.engine.summary_interval))
        self.infer_runner = inference_runner(self.inference_stage, topics, self.limits,
                                             float(settings.engine.checkpoint_interval), self.sli_progress)
        self.service_gates = ServiceGates(self.service_stage, topics, self.limits, k.partitions, self.lateness,
                                          self.max_source_skew)
        self.service_runner = self.service_gates.runner(float(settings.engine.checkpoint_interval))
        self.sli_ready = False  # see _sli_ready
        # scheduler stage (#19): key cluster, its own table; allocations go to stage 1's inputs.
        self.cluster_at: dict[str, int] = {}  # cluster -> its scheduler.jobs partition
        self.sched_runner = scheduler_runner(SchedulerStage(settings.engine), topics, self.limits,
                                             float(settings.engine.checkpoint_interval), self.cluster_at)
        self.runners = (self.node_runner, self.class_runner, self.infer_runner, self.sched_runner,
                        self.service_runner)

        self.inputs = self._raw_topic(topics.samples, topics.events, topics.metrics, topics.summaries,
                                      topics.inference, topics.sli, topics.jobs, topics.allocations)
        app.agent(self.inputs, name="gpuwarden-stages")(self._consume)
        app.timer(IDLE_S)(self._idle)
        app.on_partitions_assigned.connect(self._on_assigned)
        app.on_rebalance_complete.connect(self._reassigned)
        app.on_before_shutdown.connect(self._close_offsets)

    def _raw_topic(self, *names: str, config: Mapping[str, str] | None = None) -> faust.TopicT:
        return self.app.topic(*names, key_serializer="raw", value_serializer="raw",
                              partitions=self.partitions, internal=True, config=config)

    # -- faust callbacks ---------------------------------------------------------------------

    async def _consume(self, stream: StreamT) -> None:
        """The agent: batches of events, applied one at a time. A batch that raised crashes the
        worker (its events are not acknowledged, so they are read again after a restart)."""
        self.stream = stream
        try:
            async for events in stream.noack_take(TAKE_MAX, within=TAKE_WITHIN_S):
                async with self.lock:
                    await self._batch(events)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("batch raised: %r", exc)
            await self.app.crash(exc)
            raise

    async def _on_assigned(self, sender: Any, assigned: Any, **_: Any) -> None:
        self.book_assignment(set(assigned))
        await self._declare_outputs()

    async def _reassigned(self, sender: Any, **_: Any) -> None:
        """A rebalance's recovery ended (changelogs restored, before faust resumes the inputs):
        partitions with nothing committed go to their beginning. The assignment is booked here
        too, in case its signal has not run yet."""
        assigned = set(self.app.consumer.assignment())
        self.book_assignment(assigned)
        await self._seek_inputs({tp for tp in assigned if tp.topic in self.inputs.topics})

    def book_assignment(self, assigned: set[TP]) -> None:
        """A generation's assignment, once per generation. Keys read only from partitions this
        worker held through every generation since it last synced them stay in memory; every
        other key re-syncs from the restored changelog at its next record. Held events of the
        old assignment are read again.

        Booked when faust signals the assignment, not when a recovery completes: a recovery that
        ends after the next rebalance began signals completion for a generation already gone,
        and counting "kept" from the assignments seen at completions took a partition that
        another worker had owned in a generation in between for kept (its keys stayed at this
        worker's older in-memory state while reading resumed at the other's committed offsets:
        stage-1 summaries built from a different record set after a takeover). The group's
        generation ids are consecutive: after a gap (this worker was out of the group, another
        may have owned its partitions meanwhile) nothing is kept."""
        generation = self.app.consumer_generation_id
        if generation == self.booked_generation:
            return
        kept = self.held_through & assigned if generation == self.booked_generation + 1 else set()
        self.booked_generation, self.held_through = generation, set(assigned)
        self._keep(kept, assigned)

    def _keep(self, kept: set[TP], assigned: set[TP]) -> None:
        """Keys read only from ``kept`` partitions stay in memory, every other key re-syncs."""
        self.kept = kept
        retained = frozenset(f"{tp.topic}:{tp.partition}" for tp in kept)
        for runner in self.runners:
            runner.reassigned(retained)
        for p in list(self.nodes_at):
            if f"{self.topics.samples}:{p}" not in retained:
                del self.nodes_at[p]
        for waiting in self.held.values():
            waiting.clear()
        self.order.forget(assigned - kept | (self.order.next.keys() - assigned))
        kept_summaries = {tp.partition for tp in kept if tp.topic == self.topics.summaries}
        for p in set(self.gates) - kept_summaries:
            del self.gates[p]
        kept_allocations = {tp.partition for tp in kept if tp.topic == self.topics.allocations}
        for p in set(self.sched_gates) - kept_allocations:
            del self.sched_gates[p]
        self.sched_reporter.forget()
        for c in [c for c, p in self.class_at.items() if p not in kept_summaries]:
            del self.class_at[c]
        self.reporter.forget()
        self.service_gates.forget({tp.partition for tp in kept if tp.topic == self.topics.sli})
        self.sli_progress.forget({tp.partition for tp in kept if tp.topic == self.topics.inference})

    async def _seek_inputs(self, inputs: set[TP]) -> None:
        """Every input partition to where reading resumes (``start_at``): its committed offset,
        or its beginning when nothing is committed yet.

        faust drops the records of a fetch that ends during a rebalance and afterwards seeks
        every partition to its committed offset; aiokafka's ``seek_to_committed`` leaves a
        partition with nothing committed where its fetcher stood, past those records: they
        were lost for good (whole topics of a node never applied after a takeover). Called
        while faust still holds the partitions paused, before its own seek."""
        self.start_at = {}
        if not inputs:
            return
        consumer = self.app.consumer
        committed = await consumer.seek_to_committed()
        # Committed past what this worker applied: another worker owned the partition meanwhile,
        # though the generations looked consecutive here (a sync that failed, "generation -1",
        # still signalled the old assignment under the new generation id; its keys stayed at
        # this worker's older state and the read order waited for records before the other's
        # commit: a partition stalled for good).
        moved = {tp for tp in self.kept if (committed.get(tp) or 0) > self.order.next.get(tp, math.inf)}
        if moved:
            log.info("partitions moved on by another worker meanwhile, their keys re-sync: %s",
                     ", ".join(f"{tp.topic}:{tp.partition}" for tp in sorted(moved)))
            self._keep(self.kept - moved, set(consumer.assignment()))
        fresh = [tp for tp in inputs if not committed.get(tp)]
        earliest = await consumer.earliest_offsets(*fresh) if fresh else {}
        if fresh:
            await consumer.seek_wait({tp: earliest.get(tp) or 0 for tp in fresh})
        self.start_at = {tp: (committed.get(tp) or earliest.get(tp) or 0) for tp in inputs}
        # Until faust's own seek, which comes after this signal (seconds later in a slow
        # recovery), its fetch loop still holds the read offsets of before the rebalance: it
        # drops records below them and delivers those above. The read order sets those aside
        # (streams/readorder.py) until the records before them come again.
        for tp, offset in self.start_at.items():
            self.order.start(tp, offset)

    async def _rewind(self, gaps: set[TP], why: str) -> None:
        """Partitions missing records (:mod:`gpuwarden.streams.readorder`: records past them set
        aside, or stalled), each read again from the record it misses; ``why`` says so in the log
        (``{}``: that offset). Records a retention deletion took before they were read are said
        so, and reading goes on after them. One offsets request for all of them: under a slow
        broker each took 1.5 s, and a takeover's 13 partitions held the lock for 10 s one by one."""
        consumer = self.app.consumer
        now = asyncio.get_running_loop().time()
        due = {tp: want for tp in sorted(gaps) if (want := self.order.rewind(tp, now)) is not None}
        if not due:
            return  # not yet (faust's seek after a rebalance brings them), or under way
        try:
            earliest = await consumer.earliest_offsets(*due)
            for tp, want in list(due.items()):
                first = earliest.get(tp) or 0
                if first > want:
                    log.error("%s:%d: records %d to %d were deleted before they were read (retention "
                              "shorter than the outage?)", tp.topic, tp.partition, want, first - 1)
                    self.order.skip_to(tp, first)
                    due[tp] = first
                log.info("%s:%d: %s: read again from there", tp.topic, tp.partition, why.format(due[tp]))
            await consumer.seek_wait(due)
        except (IllegalStateError, KafkaError, ConsumerNotStarted, AssertionError, asyncio.TimeoutError) as e:
            # A rebalance took a partition meanwhile: faust seeks it to its committed offset.
            log.info("%d partitions not read again now (%r)", len(due), e)
            for tp in due:
                self.order.rewind_failed(tp)

    async def _idle(self) -> None:
        """Every ``IDLE_S`` with no batch since the last tick (as the batch consumer did on an
        empty fetch): nodes held by an input judged behind are judged again and settled
        (otherwise they would wait for the next record: at the end of a replayed topic,
        forever), and the heap is trimmed. Every tick, batches or not: stalled inputs are
        read again (:meth:`_unstall`)."""
        async with self.lock:
            self._report_counts()
            await self._unstall()
            if self.batches:
                self.batches = 0
                return
            self.trim.idle()
            try:
                assigned = self.app.consumer.assignment()
            except ConsumerNotStarted:
                return
            fence = self.app.rebalancing_count
            waiting = {p for p in self.nodes_at
                       if self.backlog.behind_at_end(p) and TP(self.topics.samples, p) in assigned}
            if waiting:
                await self._find_behind({}, waiting)
                if not await self._apply(self.node_runner, self.node_table, [], [], fence,
                                         self._settle_nodes(waiting)):
                    return
            await self._report_others(waiting, assigned)

    async def _unstall(self) -> None:
        """Every ``STALL_CHECK_S``, whatever else comes (the worker's own progress reports keep
        batches coming): input partitions with records on the broker past the next one to apply
        and nothing from them for the read order's patience are read again from there
        (:meth:`gpuwarden.streams.readorder.ReadOrder.stalled`). Records set aside at the end of
        an input, a seek that brought nothing and records lost between faust's fetch and the
        agent all end here; otherwise the node stage waited for that input for good."""
        now = asyncio.get_running_loop().time()
        if now - self.stall_checked_at < STALL_CHECK_S:
            return
        self.stall_checked_at = now
        try:
            inputs = [tp for tp in self.app.consumer.assignment() if tp.topic in self.inputs.topics]
        except ConsumerNotStarted:
            return
        stalled = self.order.stalled(await self._highwaters(inputs), now) if inputs else set()
        if stalled:
            await self._rewind(stalled, f"nothing came for {self.order.patience_s:g} s, the broker has "
                                        "records from offset {}")

    # -- one batch ---------------------------------------------------------------------------

    async def _batch(self, events: Sequence[EventT]) -> None:
        """Stage-1 records merged in Kafka timestamp order, then stage 2's. A rebalance during
        the batch's awaits ends it (see :meth:`_apply`)."""
        fence = self.app.rebalancing_count
        self.batches += 1
        self.trim.busy(len(events))
        assigned = self.app.consumer.assignment()
        generation = self.app.consumer_generation_id
        if generation != self.generation:
            self.generation = generation
            log.info("generation %s: first fetch, %d records", generation, len(events))
        summaries_topic = self.topics.summaries
        fetched: dict[TP, list[Message]] = {}
        order = self.order.batch()
        node_events: list[EventT] = []
        class_events: list[EventT] = []
        inference_events: list[EventT] = []
        sli_events: list[EventT] = []
        sched_events: list[EventT] = []
        inference_topic, jobs_topic, sli_topic = self.topics.inference, self.topics.jobs, self.topics.sli
        for event in events:
            msg = event.message
            tp = msg.tp
            # Fetched before a rebalance (taken before it, applied after): its partition may be
            # another worker's now; faust reads this worker's again from the committed offsets.
            if msg.generation_id != generation or tp not in assigned:
                continue
            if not order.accept(tp, msg.offset):  # a record before it has not come: set aside
                continue
            recs = fetched.get(tp)
            if recs is None:
                recs = fetched[tp] = []
            recs.append(msg)
            (class_events if msg.topic == summaries_topic else
             inference_events if msg.topic == inference_topic else
             sli_events if msg.topic == sli_topic else
             sched_events if msg.topic == jobs_topic else node_events).append(event)
        self.metrics.fetched(fetched)
        self.order.arrived(fetched.keys() | order.gaps, asyncio.get_running_loop().time())
        if order.gaps:
            await self._rewind(order.gaps, "a record came before offset {} did")
        partitions: set[int] = set()
        if node_events:
            node_inputs = self.node_inputs  # ranks plus scheduler.allocations (not a rank: never behind)
            node_lists = [recs for tp, recs in fetched.items() if tp.topic in node_inputs]
            partitions = {tp.partition for tp in fetched if tp.topic in node_inputs}
            await self._find_behind(fetched, partitions)
            merged = node_lists[0] if len(node_lists) == 1 else \
                list(heapq.merge(*node_lists, key=attrgetter("timestamp")))
            allocations_topic = self.topics.allocations  # scheduler stage (#19): its progress reports
            gate_reports = [m for m in merged if m.topic == allocations_topic and is_progress(m.headers)]
            if gate_reports:  # held with the batch's events, read by the settle step
                merged = [m for m in merged if not (m.topic == allocations_topic and is_progress(m.headers))]
            if not await self._apply(self.node_runner, self.node_table, node_events, merged, fence,
                                     self._settle_nodes(partitions, gate_reports)):
                return
            order.applied(tp for tp in fetched if tp.topic in node_inputs)
        await self._report_others(partitions, assigned)
        if class_events:
            summaries, progress = [], []
            for e in class_events:
                (progress if is_progress(e.message.headers) else summaries).append(e.message)
            # The progress reports are held with the summaries and read by the settle step.
            if await self._apply(self.class_runner, self.class_table, class_events, summaries, fence,
                                 self._open_gates(progress)):
                order.applied(tp for tp in fetched if tp.topic == summaries_topic)
        if inference_events:  # the inference stage reorders its records itself (streams/inferencestage.py)
            done = {tp.partition for tp in fetched if tp.topic == inference_topic}
            catching = await self._inference_behind(fetched, done)
            if not await self._sli_ready():
                done = set()  # no report yet: the next round's (every resend_s) says it
            if await self._apply(self.infer_runner, self.inference_table, inference_events,
                                 [e.message for e in inference_events], fence, self._sli_reports(done, catching)):
                order.applied(tp for tp in fetched if tp.topic == inference_topic)
        if sli_events:  # the service stage: its SLIs held for the gate, the progress reports move it
            slis, reports = [], []
            for e in sli_events:
                (reports if is_progress(e.message.headers) else slis).append(e.message)
            if await self._apply(self.service_runner, self.service_table, sli_events, slis, fence,
                                 self.service_gates.settle(reports, self.service_runner.synced)):
                order.applied(tp for tp in fetched if tp.topic == sli_topic)
        if sched_events:  # scheduler stage (#19): a cluster's polls, in offset order
            if await self._apply(self.sched_runner, self.sched_table, sched_events,
                                 [e.message for e in sched_events], fence):
                order.applied(tp for tp in fetched if tp.topic == jobs_topic)
                # behind the allocations just sent: how far they go (stage 1 waits for it)
                await self._send_all(await self._sched_progress({tp.partition for tp in fetched
                                                                 if tp.topic == jobs_topic}))
        self._report_counts()

    async def _apply(self, runner: KeyedRunner, table: faust.Table, events: list[EventT],
                     records: list[Message], fence: int, settle: Settle | None = None) -> bool:
        """One batch; its events are held (unacknowledged) until a checkpoint covers them.
        Not applied (False) once a rebalance began since the batch's ``fence``
        (``app.rebalancing_count`` then): its partitions may be another worker's now and this
        worker's keys of them un-synced, so a run would load a key's stale stored state, apply
        this batch on top and store that as the key's state at these offsets (the records
        between lost for good: issue #15, defect 4). faust seeks back to the committed offsets
        when the rebalance ends and the records come again. Not ``app.rebalancing``: faust
        resumes the flow after that seek but clears the flag only later, and a batch refused
        then is never read again."""
        if self.app.rebalancing_count != fence:
            return False
        waiting = self.held[table.name]
        waiting.extend(events)
        res = runner.run(records, lambda key: table.get(key.encode()),
                         force=len(waiting) >= HOLD_MAX, settle=settle)
        # Outputs must be on the broker before the state that says they were made.
        await self._send_all(res.out)
        if res.state:
            began = time.monotonic()
            # The table's own changelog send, awaited: the events are acknowledged (so their
            # offsets commit) only once the envelopes are on the broker.
            futs = []
            for key, envelope in res.state.items():
                raw = key.encode()
                futs.append(table.send_changelog(self._partition(raw), raw, envelope))
            await asyncio.gather(*futs)
            stream = self.stream
            assert stream is not None
            for event in waiting:
                await stream.ack(event)
            waiting.clear()
            sizes = self.stored[table.name]
            sizes.update((key, len(envelope)) for key, envelope in res.state.items())
            self.metrics.checkpointed(table.name, sizes, time.monotonic() - began)
            log.debug("%s checkpoint: %d keys, %d bytes, %s", table.name, len(res.state),
                      sum(map(len, res.state.values())), getattr(runner.stage, "counters", dict)())
        return True

    def _partition(self, key: bytes) -> int:
        """The partition of ``key``: the producers' default (murmur2) partitioner, so the
        partition its source records have. Not faust's ``use_partitioner`` lookup: that asks
        the producer's metadata, which holds only the topics it has sent to once it sent any
        (the worker crashed in ``key_partition`` at its first checkpoint after outputs)."""
        return partition_of(key, self.partitions)

    async def _declare_outputs(self) -> None:
        """Create the output topics once, all at once, starting when partitions are first
        assigned. Everything that sends awaits that one declaration: one topic after another
        (~60 ms each on the local broker) still ran when the first fetch came, and a second
        declaration from the first batch's sends raced it, holding that batch's outputs
        ~150-260 ms (bench/streams_throughput.py (b), session 6). A failed one is tried again."""
        fut = self.declaring
        if fut is None or (fut.done() and (fut.cancelled() or fut.exception())):
            fut = self.declaring = asyncio.ensure_future(
                asyncio.gather(*(t.maybe_declare() for t in self.outputs.values())))
        await asyncio.shield(fut)  # one waiter cancelled must not cancel it for the others

    async def _send_all(self, out: Iterable[Outbound]) -> None:
        """Produce in order (the worker's output producer, once the topics exist) and wait for
        the broker's acks."""
        out = list(out)
        if not out:
            return
        await self._declare_outputs()
        sender = self.sender
        await sender.start(self.outputs)
        sent = []
        for o in out:
            try:
                sent.append((o, await sender.send(o)))
            except KafkaError as e:  # refused before sending (too large for the producer)
                self._refused(o, e)
        if sent:
            results = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
            for (o, _), r in zip(sent, results):
                if isinstance(r, BaseException):
                    self._refused(o, r)

    def _refused(self, o: Outbound, error: BaseException) -> None:
        """A record the broker will never take (too large, invalid) goes to the local unsent
        log and the worker moves on; anything else (the broker away) stops the batch, so its
        events are not acknowledged and the records are read again."""
        if not isinstance(error, KafkaError) or error.retriable:
            raise error
        self.unsent.record(o.topic, o.key, o.value, error)

    def _report_counts(self) -> None:
        """Log what was set aside (dead letters, letters the broker refused, fields a newer
        writer sends) when it changed, at most every 5 s."""
        self.metrics.refresh(self.app.consumer, self.runners, self.unsent, self.class_stage,
                             (self.node_stage, self.sched_runner.stage, self.service_stage))
        wall = asyncio.get_running_loop().time()
        if wall - self.reported_at < 5.0:
            return
        runners = self.runners
        counts = {"dead_letters": sum(r.dead for r in runners), "unsent": self.unsent.count,
                  **{f"unknown {t} {f}": n for r in runners for (t, f), n in sorted(r.unknown.items())}}
        if counts != (self.reported or {"dead_letters": 0, "unsent": 0}):
            log.info("counts: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
            self.reported, self.reported_at = counts, wall

    # -- backlog judgement -------------------------------------------------------------------

    async def _find_behind(self, fetched: Mapping[TP, list[Message]], partitions: set[int]) -> None:
        """Per partition of this batch (a node's inputs are co-partitioned): the source ranks
        with records past the batch, and per node (record key) those with records later in the
        batch, not applied yet. While catching up, the node waits for them. Read up to: the
        batch's end, else what this worker applied, else where reading started; high-water
        marks asked of the broker now, so never older than the records in hand (a mark from an
        older fetch response missed records sent before them: a worker that kept up with a
        producer sending faster than real time released a node past records not read yet and
        dropped them as late)."""
        ranks, position = self.ranks, self.node_runner.position
        highs = await self._highwaters([TP(t, p) for p in partitions for t in ranks])
        last: dict[tuple[str, int, bytes | None], int] = {}
        beyond: dict[int, set[int]] = {}
        for partition in partitions:
            out = beyond[partition] = set()
            for topic, rank in ranks.items():
                tp = TP(topic, partition)
                recs = fetched.get(tp)
                if recs:
                    for r in recs:
                        last[topic, partition, r.key] = r.offset
                    pos: int | None = recs[-1].offset + 1
                else:
                    pos = position.get(f"{topic}:{partition}", self.start_at.get(tp))
                high = highs.get(tp)
                if pos is None or high is None or high > pos:
                    out.add(rank)
        self.backlog.start(last, beyond)

    async def _highwaters(self, tps: list[TP]) -> dict[TP, int]:
        """End offsets from the broker; {} when it cannot say (every topic then counts as behind).

        Asked through a client of the worker's own, not ``app.consumer.highwaters``: faust runs
        that in its consumer thread, behind the fetch it is waiting on (up to 1 s when the topics
        are quiet), so every batch waited for it: a live XID 79's page came 1.04 s after the
        agent published it, against 0.10 s before (bench/alert_latency.py)."""
        try:
            client = await self._offsets_client()
            ends = await client.end_offsets([TopicPartition(tp.topic, tp.partition) for tp in tps])
            return {TP(tp.topic, tp.partition): o for tp, o in ends.items()}
        except (IllegalStateError, KafkaError, KafkaConnectError) as e:
            log.info("high-water marks not read (%s): inputs count as behind", e)
            return {}

    async def _offsets_client(self) -> AIOKafkaConsumer:
        """A consumer outside any group, used only to ask for end offsets; started at first use."""
        if self.offsets is None:
            kw = kafka_kwargs(self.kafka)
            client = AIOKafkaConsumer(**kw, enable_auto_commit=False)
            await start_client(client, kw)
            self.offsets = client
        return self.offsets

    async def _close_offsets(self, sender: Any, **_: Any) -> None:
        """Before faust stops: the worker's own clients (outputs flushed first)."""
        await self.sender.stop()
        client, self.offsets = self.offsets, None
        if client is not None:
            await client.stop()

    # -- stage glue --------------------------------------------------------------------------

    def _emit_node(self, record: Any, msg: Consumed) -> list[Outbound]:
        scratch = self.scratch
        self.node_stage.gate = self._sched_gate(msg.partition)
        try:
            behind = self.backlog.behind(msg.topic, msg.partition, msg.offset, msg.key)
            self.node_stage.process(record, behind, scratch)
            if type(record) is not JobAllocation:  # scheduler stage (#19): a node known only from its
                self.nodes_at[msg.partition].add(record.node)  # allocations makes no summaries: no progress
            return self._node_outbound(scratch)
        finally:
            scratch.transitions.clear()
            scratch.summaries.clear()

    def _node_outbound(self, out: StageOutput) -> list[Outbound]:
        """Transitions and summaries to produce."""
        if not out.transitions and not out.summaries:
            return []
        self.metrics.produced(out.transitions)
        topics = self.topics
        return [*(Outbound(topics.alerts, t.fingerprint.encode(), encode(t)) for t in out.transitions),
                *(Outbound(topics.summaries, s.task.encode(), encode(s)) for s in out.summaries)]

    def _progress_out(self, partitions: Iterable[int]) -> list[Outbound]:
        """Progress reports for these stage-1 partitions that are due, each to every
        ``task.summaries`` partition (behind the summaries already sent there)."""
        sends: list[Outbound] = []
        wall = asyncio.get_running_loop().time()
        for p in sorted(partitions):
            nodes = [self.node_stage.position(n) for n in sorted(self.nodes_at.get(p, ()))
                     if self.node_runner.synced(n)]
            catching = bool(self.backlog.behind_at_end(p))
            progress = StageProgress(partition=p, catching_up=catching, nodes=len(nodes),
                                     watermark=partition_watermark((n for n in nodes if n), catching,
                                                                   self.lateness))
            if self.reporter.due(progress, wall):
                value, key = encode(progress), f"progress:{p}".encode()
                sends += [Outbound(self.topics.summaries, key, value, PROGRESS_HEADERS, s)
                          for s in range(self.partitions)]
        return sends

    async def _report_others(self, done: set[int], assigned: set[TP]) -> None:
        """Every ``reporter.resend_s``: the stage-1 partitions of ours that no batch brought
        (empty ones among them: they must say so, or stage 2 waits for them) are judged again
        and reported."""
        wall = asyncio.get_running_loop().time()
        if wall - self.reported_all_at < self.reporter.resend_s:
            return
        self.reported_all_at = wall
        others = {tp.partition for tp in assigned if tp.topic == self.topics.samples} - done
        if others:
            await self._find_behind({}, others)
            await self._send_all(self._progress_out(others))
        inference = {tp.partition for tp in assigned if tp.topic == self.topics.inference}
        if inference and await self._sli_ready():  # the service stage's gate waits for each inference partition
            await self._send_all(self._sli_reports(inference, await self._inference_behind({}, inference))()[1])

        jobs = {tp.partition for tp in assigned if tp.topic == self.topics.jobs}  # scheduler stage (#19)
        if jobs:
            await self._send_all(await self._sched_progress(jobs))

    async def _sli_ready(self) -> bool:
        """Whether every ``inference.sli`` partition has a leader on the broker. The progress
        reports go to each by number, and right after this worker created the topic a send to a
        partition not led yet held a batch for minutes; until then none is sent (the reports are
        resent every ``resend_s``). Once true, it stays."""
        if not self.sli_ready:
            topic = self.topics.sli
            self.sli_ready = len(await self._highwaters([TP(topic, p) for p in range(self.partitions)])) \
                == self.partitions
        return self.sli_ready

    async def _inference_behind(self, fetched: Mapping[TP, list[Message]], partitions: set[int]) -> set[int]:
        """The inference partitions with records past what this batch (or the runner) read."""
        topic = self.topics.inference
        highs = await self._highwaters([TP(topic, p) for p in partitions])
        behind = set()
        for p in partitions:
            tp = TP(topic, p)
            recs = fetched.get(tp)
            pos = recs[-1].offset + 1 if recs else self.infer_runner.position.get(f"{topic}:{p}", self.start_at.get(tp))
            high = highs.get(tp)
            if pos is None or high is None or high > pos:
                behind.add(p)
        return behind

    def _sli_reports(self, partitions: set[int], catching: set[int]) -> Settle:
        """After the inference stage's batch: its partitions' progress, behind their SLIs."""
        def settle() -> tuple[list[str], list[Outbound]]:
            return [], self.sli_progress.reports(partitions, catching, asyncio.get_running_loop().time())
        return settle

    async def _sched_progress(self, partitions: set[int]) -> list[Outbound]:
        """The scheduler stage's progress on these ``scheduler.jobs`` partitions that is due, each
        to every ``scheduler.allocations`` partition (behind the allocations sent there): per
        partition, the last poll closed over its clusters (``progress.partition_watermark``),
        catching up while it has records not read yet."""
        jobs, runner = self.topics.jobs, self.sched_runner
        stage: SchedulerStage = runner.stage  # type: ignore[assignment]
        highs = await self._highwaters([TP(jobs, q) for q in partitions])
        marks: defaultdict[int, list[tuple[float, float]]] = defaultdict(list)
        for c in stage.clusters():
            if runner.synced(c) and c in self.cluster_at:
                marks[self.cluster_at[c]].append(stage.position(c))
        wall = asyncio.get_running_loop().time()
        sends: list[Outbound] = []
        for q in sorted(partitions):
            tp = TP(jobs, q)
            pos, high = runner.position.get(f"{jobs}:{q}", self.start_at.get(tp)), highs.get(tp)
            catching = pos is None or high is None or high > pos
            progress = StageProgress(partition=q, catching_up=catching, nodes=len(marks[q]),
                                     watermark=partition_watermark(marks[q], catching, self.lateness))
            if self.sched_reporter.due(progress, wall):
                value, key = encode(progress), f"progress:{q}".encode()
                sends += [Outbound(self.topics.allocations, key, value, PROGRESS_HEADERS, s)
                          for s in range(self.partitions)]
        return sends

    def _settle_nodes(self, partitions: Iterable[int], gate_reports: Sequence[Message] = ()) -> Settle:
        """After a batch: the scheduler stage's progress reports in it move the allocation gates
        on; the nodes of its partitions (and of those whose gate moved) release what their
        inputs' final state allows (a node held back by an input behind at its last record would
        otherwise wait for its next record: a sample period live, forever at the end of a
        replayed topic) and judge the allocation instants their gate allows; then the
        partitions' progress, behind their summaries."""
        def settle() -> tuple[list[str], list[Outbound]]:
            changed: list[str] = []
            sends: list[Outbound] = []
            moved = self._read_reports(gate_reports, self._sched_gate, sends)
            for p in sorted({*partitions, *moved}):
                self.node_stage.gate = self._sched_gate(p)
                out, behind = StageOutput([], []), self.backlog.behind_at_end(p)
                for node in sorted(self.nodes_at.get(p, ())):
                    if self.node_runner.synced(node) and self.node_stage.advance(node, behind, out):
                        changed.append(node)
                sends += self._node_outbound(out)
            return changed, sends + self._progress_out(partitions)
        return settle

    def _read_reports(self, reports: Iterable[Message], gate: Callable[[int], Gate],
                      sends: list[Outbound]) -> set[int]:
        """Progress reports into the gate of the partition each was read on (a malformed one is
        dead-lettered into ``sends``); the partitions whose gate moved on."""
        moved, letters = read_reports(reports, gate, self.limits)
        sends.extend(letters)
        return moved

    def _sched_gate(self, partition: int) -> Gate:
        """The scheduler watermark read on a ``scheduler.allocations`` partition: over the
        ``scheduler.jobs`` partitions there are (a topic auto-created with fewer than
        ``kafka.partitions`` would otherwise leave some never heard from)."""
        g = self.sched_gates.get(partition)
        if g is None:
            sources = self.app.consumer.topic_partitions(self.topics.jobs) or self.partitions
            g = self.sched_gates[partition] = Gate(sources, self.lateness, self.max_source_skew)
        return g

    def _gate(self, partition: int) -> Gate:
        g = self.gates.get(partition)
        if g is None:
            g = self.gates[partition] = Gate(self.partitions, self.lateness, self.max_source_skew)
        return g

    def _emit_class(self, summary: TaskSummary, msg: Consumed) -> list[Outbound]:
        self.class_at[summary.task] = msg.partition
        made = self.class_stage.process(summary, self._gate(msg.partition).value)
        self.metrics.produced(made)
        return [Outbound(self.topics.alerts, t.fingerprint.encode(), encode(t)) for t in made]

    def _open_gates(self, progress: list[Message]) -> Settle:
        """After a batch's summaries (judged against the gates as they stood before it): its
        progress reports move the gates on, and the classes behind a gate that moved release
        what it now allows."""
        def settle() -> tuple[list[str], list[Outbound]]:
            sends: list[Outbound] = []
            moved = self._read_reports(progress, self._gate, sends)
            changed = [c for c, p in sorted(self.class_at.items()) if p in moved and self.class_runner.synced(c)]
            for c in changed:
                made = self.class_stage.release(c, self.gates[self.class_at[c]].value)
                self.metrics.produced(made)
                sends += [Outbound(self.topics.alerts, t.fingerprint.encode(), encode(t)) for t in made]
            return changed, sends
        return settle


def _node_of(record: Any) -> str:
    return record.node  # type: ignore[no-any-return]


def _class_of(record: TaskSummary) -> str:
    return record.task

