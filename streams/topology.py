"""The faust topology: two keyed stages over Kafka, state in changelog tables.

Stage 1 (key node) reads ``gpu.samples``, ``gpu.events`` and ``task.metrics``
(all keyed by node, so co-partitioned), runs :class:`gpuwarden.streams.engine.NodeStage`,
and produces transitions to ``alerts`` (key fingerprint) and task summaries to
``task.summaries`` (key task class: the repartition for stage 2), each batch's summaries
followed by progress reports to every partition (:mod:`gpuwarden.streams.progress`). Stage 2
(key task class) reads ``task.summaries`` and runs :class:`gpuwarden.streams.engine.ClassStage`
for the per-class baselines, releasing a class's summaries once every stage-1 partition has
passed them. The scheduler stage (key cluster, :class:`gpuwarden.streams.schedstage.SchedulerStage`,
its runner in :mod:`gpuwarden.streams.schedrunner`) reads ``scheduler.jobs`` and sends job
allocations on ``scheduler.allocations`` (key node), which stage 1 reads with its other
inputs. Each stage keeps a faust Table (compacted changelog)
of per-key envelopes (see :mod:`gpuwarden.streams.keyed`), written for the keys that changed
every ``engine.checkpoint_interval`` of wall time; input offsets are acknowledged
(so committed) only after the checkpoint that covers them.

faust costs ~130-200 µs per record on its Stream path, so the input topics are
not read by agents: :mod:`gpuwarden.streams.batchconsumer` hands each fetch to
:func:`build_app`'s handler in one call, and values stay raw bytes.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from operator import attrgetter
from pathlib import Path
from typing import Any

import faust
from aiokafka.errors import IllegalStateError, KafkaError
from aiokafka.structs import TopicPartition
from faust.types import TP

from gpuwarden.contract import (
    ContractError,
    GpuEvent,
    JobAllocation,
    NodeSnapshot,
    StageProgress,
    TaskMetric,
    TaskSummary,
    Topics,
    encode,
)
from gpuwarden.deadletter import UnsentLog
from gpuwarden.kafka import broker_credentials
from gpuwarden.streams.backlog import Backlog
from gpuwarden.streams.batchconsumer import batch_consumer
from gpuwarden.streams.config import StreamsSettings
from gpuwarden.streams.dlq import Consumed, Limits, Outbound, decode_inbound, to_dlq
from gpuwarden.streams.engine import StageOutput
from gpuwarden.streams.keyed import KeyedRunner, Settle, Source
from gpuwarden.streams.progress import HEADERS as PROGRESS_HEADERS
from gpuwarden.streams.progress import Gate, Reporter, is_progress, partition_watermark
from gpuwarden.streams.runtime import HeapTrim
from gpuwarden.streams.schedrunner import scheduler_runner  # scheduler stage (#19)
from gpuwarden.streams.schedstage import SchedulerStage  # scheduler stage (#19)

log = logging.getLogger("gpuwarden.streams")

#: Quick takeover when a worker dies, yet tolerant of a slow batch (heartbeats
#: run on the same event loop). The broker's group.min.session.timeout.ms
#: (default 6 s) is the floor.
SESSION_TIMEOUT_S = 10.0
HEARTBEAT_INTERVAL_S = 2.0
COMMIT_INTERVAL_S = 1.0
#: Records held unacknowledged for the next checkpoint before one is forced (bounds
#: what a takeover reads again).
HOLD_MAX = 20000
#: Producer, changelog-topic and DLQ-topic record size limit: a busy node's state envelope
#: is ~200 kB compressed, above a few hundred kB faust's 1 MB default gets close; a dead
#: letter holds a record of up to ``limits.max_record_bytes`` (≤ 8 MiB) in base64.
MAX_RECORD_BYTES = 16 << 20
#: The workers' outputs (dead letters holding base64 JSON: ~4x smaller) are compressed.
COMPRESSION = "zstd"
#: Per-partition fetch size. A fetch's records are merged by their Kafka timestamps,
#: but one topic's fetch can run ahead of another's while catching up on a backlog;
#: small fetches bound how far (see docs/streams-faust.md).
FETCH_BYTES = 4 << 20


def app_id(settings: StreamsSettings) -> str:
    """One consumer group per fleet: workers with the same id share the partitions."""
    return f"{settings.kafka.topic_prefix}{settings.kafka.client_id}-streams"


def default_stages(settings: StreamsSettings) -> tuple[Any, Any]:
    """The real engine stages, with the rules named in the config (else the default pack)."""
    from gpuwarden.streams.engine import ClassStage, NodeStage
    from gpuwarden.streams.rules import load_rules

    rules = load_rules(settings.engine.rules)
    return NodeStage(rules, settings.engine, settings.limits.max_past_skew), ClassStage(rules, settings.engine)


def build_app(
    settings: StreamsSettings, *, worker_id: str, data_dir: Path,
    node_stage: Any = None, class_stage: Any = None,
) -> faust.App:
    """The faust app for ``settings``; stages default to :func:`default_stages`."""
    if node_stage is None or class_stage is None:
        node_stage, class_stage = default_stages(settings)
    k = settings.kafka
    topics = Topics(k.topic_prefix)
    limits = Limits.of(settings)
    unsent = UnsentLog(data_dir / "unsent.jsonl")
    app = faust.App(
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
        broker_commit_interval=COMMIT_INTERVAL_S,
        table_standby_replicas=0,
        producer_acks=-1,
        producer_max_request_size=MAX_RECORD_BYTES,
        producer_compression_type=COMPRESSION,
        consumer_max_fetch_size=FETCH_BYTES,
        web_enabled=False,
        autodiscover=False,
    )

    def raw_topic(*names: str, config: Mapping[str, str] | None = None) -> faust.TopicT:
        return app.topic(*names, key_serializer="raw", value_serializer="raw",
                         partitions=k.partitions, internal=True, config=config)

    big = {"max.message.bytes": str(MAX_RECORD_BYTES)}  # changelogs and dead-letter topics

    def state_table(name: str) -> faust.Table:
        # bytes key and value types make faust use the raw codec both ways (a
        # ``schema`` alone leaves recovery decoding JSON). The changelog partition
        # comes from the same murmur2 partitioner as the source records' keys.
        return app.Table(name, default=None, partitions=k.partitions, use_partitioner=True,
                         key_type=bytes, value_type=bytes,
                         extra_topic_configs=big)

    outputs = {
        **{name: raw_topic(name) for name in (topics.alerts, topics.summaries, topics.allocations)},
        **{name: raw_topic(name, config=big)
           for name in (Topics.dlq(t) for t in (topics.samples, topics.events, topics.metrics,
                                                topics.summaries, topics.jobs, topics.allocations))},
    }
    node_table, class_table = state_table("node-state"), state_table("class-state")
    sched_table = state_table("scheduler-state")  # scheduler stage (#19)
    declaring: list[asyncio.Future] = []

    async def declare_outputs() -> None:
        """Create the output topics once, all at once, starting when partitions are first
        assigned. Everything that sends awaits that one declaration: one topic after another
        (~60 ms each on the local broker) still ran when the first fetch came, and a second
        declaration from the first batch's sends raced it, holding that batch's outputs
        ~150-260 ms (bench/streams_throughput.py (b), session 6). A failed one is tried again."""
        if not declaring or (declaring[0].done() and (declaring[0].cancelled() or declaring[0].exception())):
            declaring[:] = [asyncio.ensure_future(asyncio.gather(*(t.maybe_declare() for t in outputs.values())))]
        await asyncio.shield(declaring[0])  # one waiter cancelled must not cancel it for the others

    @app.on_partitions_assigned.connect
    async def on_assigned(sender: Any, assigned: Any, **_: Any) -> None:
        await declare_outputs()

    async def send_all(out: Iterable[Outbound]) -> None:
        """Produce in order and wait for the broker's acks (faust's pre-commit flush can
        return before its send buffer drained). Straight to the producer, past faust's
        ``Topic.send`` (message objects, sensors): ~110 µs per record there, a sixth of the
        worker's time on a fetch of 3,600 snapshots with 280 outputs."""
        await declare_outputs()
        producer = app.producer
        sent = []
        for o in out:
            try:
                sent.append((o, await producer.send(o.topic, o.key, o.value, o.partition, None,
                                                    list(o.headers) or None)))
            except KafkaError as e:  # refused before sending (too large for the producer)
                refused(o, e)
        if sent:
            results = await asyncio.gather(*(f for _, f in sent), return_exceptions=True)
            for (o, _), r in zip(sent, results):
                if isinstance(r, BaseException):
                    refused(o, r)

    def refused(o: Outbound, error: BaseException) -> None:
        """A record the broker will never take (too large, invalid) goes to the local unsent
        log and the worker moves on; anything else (the broker away) stops the batch, so its
        offsets are not committed and the records are read again."""
        if not isinstance(error, KafkaError) or error.retriable:
            raise error
        unsent.record(o.topic, o.key, o.value, error)

    held: dict[str, list[tuple[TP, int]]] = {"node-state": [], "class-state": [],
                                             "scheduler-state": []}  # scheduler stage (#19)

    async def apply(runner: KeyedRunner, table: faust.Table, records: list[Any], fence: int,
                    settle: Settle | None = None, aside: list[Any] | None = None) -> bool:
        """One batch; its offsets (and those of the records ``aside``, read but handled by
        ``settle``) are held (not committable) until a checkpoint covers them.
        Not applied (False) once a rebalance began since the fetch's ``fence``
        (``app.rebalancing_count`` then): its partitions may be another worker's now and this
        worker's keys of them un-synced, so a run would load a key's stale stored state, apply
        this batch on top and store that as the key's state at these offsets (the records
        between lost for good: issue #15, defect 4). faust seeks back to the committed offsets
        when the rebalance ends and the records come again. Not ``app.rebalancing``: faust
        resumes the flow after that seek but clears the flag only later, and a fetch refused
        then is never read again."""
        if app.rebalancing_count != fence:
            return False
        waiting = held[table.name]
        waiting.extend((TP(r.topic, r.partition), r.offset) for r in (*records, *(aside or ())))
        res = runner.run(records, lambda key: table.get(key.encode()),
                         force=len(waiting) >= HOLD_MAX, settle=settle)
        # Outputs must be on the broker before the state that says they were made.
        await send_all(res.out)
        if res.state:
            # Not ``table[key] = ...``: faust buffers that send and its pre-commit flush may
            # return before the buffer drained. Await delivery, then let the offsets commit.
            futs = []
            for key, envelope in res.state.items():
                table.data[key.encode()] = envelope
                futs.append(await table.changelog_topic.send(
                    key=key.encode(), value=envelope, key_serializer="raw", value_serializer="raw"))
            await asyncio.gather(*futs)
            app.consumer.ack_offsets(waiting)
            waiting.clear()
            log.debug("%s checkpoint: %d keys, %d bytes, %s", table.name, len(res.state),
                      sum(map(len, res.state.values())), getattr(runner.stage, "counters", dict)())
        return True

    reported: dict[str, Any] = {"at": float("-inf")}  # the counts last logged

    def report_counts() -> None:
        """Log what was set aside (dead letters, letters the broker refused, fields a newer
        writer sends) when it changed, at most every 5 s."""
        wall = asyncio.get_running_loop().time()
        if wall - reported["at"] < 5.0:
            return
        counts = {"dead_letters": node_runner.dead + class_runner.dead + sched_runner.dead,  # + scheduler (#19)
                  "unsent": unsent.count,
                  **{f"unknown {t} {f}": n for r in (node_runner, class_runner)
                     for (t, f), n in sorted(r.unknown.items())}}
        if counts != reported.get("counts", {"dead_letters": 0, "unsent": 0}):
            log.info("counts: %s", ", ".join(f"{k}={v}" for k, v in counts.items()))
            reported.update(counts=counts, at=wall)

    ranks = {topics.samples: 0, topics.events: 1, topics.metrics: 2}
    # scheduler stage (#19): job allocations are a stage-1 input too, but never hold a node back
    # (they come through the scheduler stage, and one behind the samples applies on arrival).
    node_inputs = {*ranks, topics.allocations}
    backlog = Backlog(ranks)

    async def find_behind(fetched: Mapping[TP, list[Any]], partitions: set[int], assigned: set[TP]) -> None:
        """Per partition of this fetch (a node's inputs are co-partitioned): the source ranks
        with records past the fetch, and per node (record key) those with records later in the
        fetch, not applied yet. While catching up, the node waits for them. Read up to: the
        fetch's end, else what this worker applied, else where the fetcher stands; high-water
        mark from the last fetch response. A mark read before the
        newest records in hand were fetched may miss records sent before them (the fetcher
        skips a partition while it holds records of it): its topic counts as behind until a
        later read (next fetch, or :func:`idle`). Without this, a worker that had caught up
        with a producer sending faster than real time (a spool drained after an outage)
        released a node past records not read yet and dropped them as late."""
        consumer = app.consumer
        last, beyond = {}, {}
        for partition in partitions:
            out = set()
            marks = {tp: consumer.polled(tp) for tp in (TP(t, partition) for t in ranks)}
            fresh = max((marks[tp][1] or 0 for tp in marks if fetched.get(tp)), default=0)
            fresh = fresh_at[partition] = max(fresh, fresh_at.get(partition, 0))
            for topic, rank in ranks.items():
                tp = TP(topic, partition)
                recs = fetched.get(tp)
                if recs:
                    for r in recs:
                        last[topic, partition, r.key] = r.offset
                    pos = recs[-1].offset + 1
                else:
                    pos = node_runner.position.get(f"{topic}:{partition}", asked.get(tp))
                high, read_at = marks[tp]
                if pos is None or high is None:
                    pos, high = await ask(tp, pos, high, assigned)  # from the broker: current
                elif read_at is not None and read_at < fresh:
                    out.add(rank)
                    continue
                if pos is None or high is None or high > pos:
                    out.add(rank)
            beyond[partition] = out
        backlog.start(last, beyond)

    fresh_at: dict[int, int] = {}  # partition -> when (ms) the newest records applied were fetched

    asked: dict[TP, int] = {}  # fetcher positions of partitions that delivered nothing yet

    async def ask(tp: TP, pos: int | None, high: int | None,
                  assigned: set[TP]) -> tuple[int | None, int | None]:
        """Position and high-water mark not known yet (just after a rebalance), from the
        consumer and the broker: a guess either way loses records (released past them) or
        stalls a node. None when unknowable (not ours, revoked meanwhile): counts as behind."""
        if tp not in assigned:
            return None, None
        ktp = TopicPartition(tp.topic, tp.partition)
        try:
            if pos is None:  # kept until a rebalance: only a fetch (or a rebalance's seek) moves it
                pos = asked[tp] = await app.consumer.position(ktp)
            if high is None:
                high = (await app.consumer.highwaters(ktp))[ktp]
        except IllegalStateError:
            return None, None
        return pos, high

    nodes_at: defaultdict[int, set[str]] = defaultdict(set)  # partition -> nodes read from it

    scratch = StageOutput([], [])  # one per worker: a new one per record cost ~4 % of its CPU

    def emit_node(record: Any, msg: Consumed) -> list[Outbound]:
        try:
            behind = backlog.behind(msg.topic, msg.partition, msg.offset, msg.key)
            node_stage.process(record, behind, scratch)
            if type(record) is not JobAllocation:  # scheduler stage (#19): a node known only from its
                nodes_at[msg.partition].add(record.node)  # allocations makes no summaries: no progress
            return node_outbound(scratch)
        finally:
            scratch.transitions.clear()
            scratch.summaries.clear()

    def node_outbound(out: Any) -> list[Outbound]:
        """Transitions and summaries to produce."""
        if not out.transitions and not out.summaries:
            return []
        return [*(Outbound(topics.alerts, t.fingerprint.encode(), encode(t)) for t in out.transitions),
                *(Outbound(topics.summaries, s.task.encode(), encode(s)) for s in out.summaries)]

    reporter = Reporter(float(settings.engine.summary_interval))
    lateness = float(settings.engine.summary_lateness)

    def progress_out(partitions: Iterable[int]) -> list[Outbound]:
        """Progress reports for these stage-1 partitions that are due, each to every
        ``task.summaries`` partition (behind the summaries already sent there)."""
        sends: list[Outbound] = []
        wall = asyncio.get_running_loop().time()
        for p in sorted(partitions):
            nodes = [node_stage.position(n) for n in sorted(nodes_at.get(p, ())) if node_runner.synced(n)]
            catching = bool(backlog.behind_at_end(p))
            progress = StageProgress(partition=p, catching_up=catching, nodes=len(nodes),
                                     watermark=partition_watermark((n for n in nodes if n), catching, lateness))
            if reporter.due(progress, wall):
                value, key = encode(progress), f"progress:{p}".encode()
                sends += [Outbound(topics.summaries, key, value, PROGRESS_HEADERS, s) for s in range(k.partitions)]
        return sends

    reported_all = {"at": float("-inf")}

    async def report_others(done: set[int], assigned: set[TP]) -> None:
        """Every ``reporter.resend_s``: the stage-1 partitions of ours that no fetch brought
        (empty ones among them: they must say so, or stage 2 waits for them) are judged again
        and reported."""
        wall = asyncio.get_running_loop().time()
        if wall - reported_all["at"] < reporter.resend_s:
            return
        reported_all["at"] = wall
        others = {tp.partition for tp in assigned if tp.topic == topics.samples} - done
        if others:
            await find_behind({}, others, assigned)
            await send_all(progress_out(others))

    def settle_nodes(partitions: Iterable[int]) -> Settle:
        """After a fetch: the nodes of its partitions release what their inputs' final state
        allows (a node held back by an input behind at its last record would otherwise wait for
        its next record: a sample period live, forever at the end of a replayed topic); then the
        partitions' progress, behind their summaries."""
        def settle() -> tuple[list[str], list[Outbound]]:
            changed: list[str] = []
            sends: list[Outbound] = []
            for p in partitions:
                out, behind = StageOutput([], []), backlog.behind_at_end(p)
                for node in sorted(nodes_at.get(p, ())):
                    if node_runner.synced(node) and node_stage.advance(node, behind, out):
                        changed.append(node)
                sends += node_outbound(out)
            return changed, sends + progress_out(partitions)
        return settle

    gates: dict[int, Gate] = {}  # task.summaries partition -> the watermark read on it
    class_at: dict[str, int] = {}  # task class -> its task.summaries partition

    def gate(partition: int) -> Gate:
        g = gates.get(partition)
        if g is None:
            g = gates[partition] = Gate(k.partitions, lateness, float(settings.engine.max_source_skew))
        return g

    def emit_class(summary: TaskSummary, msg: Consumed) -> list[Outbound]:
        class_at[summary.task] = msg.partition
        return [Outbound(topics.alerts, t.fingerprint.encode(), encode(t))
                for t in class_stage.process(summary, gate(msg.partition).value)]

    def open_gates(progress: list[Any]) -> Settle:
        """After a fetch's summaries (judged against the gates as they stood before it): its
        progress reports move the gates on, and the classes behind a gate that moved release
        what it now allows."""
        def settle() -> tuple[list[str], list[Outbound]]:
            moved: set[int] = set()
            sends: list[Outbound] = []
            for r in progress:
                try:
                    report = decode_inbound(r, StageProgress, limits, key_of=None)
                except ContractError as e:
                    sends.append(to_dlq(r, str(e), max_bytes=limits.max_bytes))
                    continue
                if gate(r.partition).update(report):
                    moved.add(r.partition)
            changed = [c for c, p in sorted(class_at.items()) if p in moved and class_runner.synced(c)]
            for c in changed:
                sends += [Outbound(topics.alerts, t.fingerprint.encode(), encode(t))
                          for t in class_stage.release(c, gates[class_at[c]].value)]
            return changed, sends
        return settle

    def node_of(record: Any) -> str:
        return record.node

    def class_of(record: TaskSummary) -> str:
        return record.task

    node_runner = KeyedRunner(node_stage, {
        topics.samples: Source(NodeSnapshot, node_of, Topics.dlq(topics.samples)),
        topics.events: Source(GpuEvent, node_of, Topics.dlq(topics.events)),
        topics.metrics: Source(TaskMetric, node_of, Topics.dlq(topics.metrics)),
        topics.allocations: Source(JobAllocation, node_of, Topics.dlq(topics.allocations)),  # scheduler stage (#19)
    }, emit_node, limits, float(settings.engine.checkpoint_interval))
    class_runner = KeyedRunner(class_stage, {
        topics.summaries: Source(TaskSummary, class_of, Topics.dlq(topics.summaries)),
    }, emit_class, limits, float(settings.engine.checkpoint_interval))
    # scheduler stage (#19): key cluster, its own table; allocations go to stage 1's inputs.
    sched_runner = scheduler_runner(SchedulerStage(settings.engine), topics, limits,
                                    float(settings.engine.checkpoint_interval))
    previous: set[TP] = set()

    @app.on_rebalance_complete.connect
    async def reassigned(sender: Any, **_: Any) -> None:
        """Keys of partitions this worker kept stay in memory; the others re-sync from the
        restored changelog. Held offsets of the old assignment are read again."""
        assigned = app.consumer.assignment()
        retained = frozenset(f"{tp.topic}:{tp.partition}" for tp in assigned & previous)
        previous.clear()
        previous.update(assigned)
        for runner in (node_runner, class_runner, sched_runner):  # + scheduler stage (#19)
            runner.reassigned(retained)
        asked.clear()
        fresh_at.clear()
        for p in list(nodes_at):
            if f"{topics.samples}:{p}" not in retained:
                del nodes_at[p]
        for waiting in held.values():
            waiting.clear()
        kept = {tp.partition for tp in assigned
                if tp.topic == topics.summaries and f"{tp.topic}:{tp.partition}" in retained}
        for p in set(gates) - kept:
            del gates[p]
        for c in [c for c, p in class_at.items() if p not in kept]:
            del class_at[c]
        reporter.forget()

    trim = HeapTrim()

    async def handle(fetched: Mapping[TP, list[Any]]) -> None:
        """One fetch: stage-1 records merged in Kafka timestamp order (the order agents sent
        them), then stage 2's. A rebalance during the fetch's awaits ends it (see ``apply``)."""
        fence = app.rebalancing_count
        trim.busy(sum(map(len, fetched.values())))
        assigned = app.consumer.assignment()
        node_lists = [recs for tp, recs in fetched.items() if tp.topic in node_inputs and tp in assigned]
        partitions: set[int] = set()
        if node_lists:
            partitions = {tp.partition for tp in fetched if tp.topic in node_inputs and tp in assigned}
            await find_behind(fetched, partitions, assigned)
            merged = node_lists[0] if len(node_lists) == 1 else \
                list(heapq.merge(*node_lists, key=attrgetter("timestamp")))
            if not await apply(node_runner, node_table, merged, fence, settle_nodes(partitions)):
                return
        await report_others(partitions, assigned)
        summaries = [r for tp, recs in fetched.items() if tp.topic == topics.summaries and tp in assigned
                     for r in recs]
        if summaries:
            progress = [r for r in summaries if is_progress(r.headers)]
            if progress:
                summaries = [r for r in summaries if not is_progress(r.headers)]
            await apply(class_runner, class_table, summaries, fence, open_gates(progress), progress)
        jobs = [r for tp, recs in fetched.items() if tp.topic == topics.jobs and tp in assigned  # scheduler
                for r in recs]  # stage (#19): a cluster's polls, in offset order
        if jobs:
            await apply(sched_runner, sched_table, jobs, fence)
        report_counts()

    async def idle() -> None:
        """Nothing came: nodes held by an input judged behind (a backlog, or a high-water mark
        older than the records applied) are judged again with what the fetcher read since,
        and settled. Otherwise they would wait for the next record (at the end of a replayed
        topic: forever)."""
        fence = app.rebalancing_count
        report_counts()
        trim.idle()
        assigned = app.consumer.assignment()
        waiting = {p for p in nodes_at if backlog.behind_at_end(p) and TP(topics.samples, p) in assigned}
        if waiting:
            await find_behind({}, waiting, assigned)
            if not await apply(node_runner, node_table, [], fence, settle_nodes(waiting)):
                return
        await report_others(waiting, assigned)

    inputs = (topics.samples, topics.events, topics.metrics, topics.summaries,
              topics.jobs, topics.allocations)  # + scheduler stage (#19)
    app.transport.Consumer = batch_consumer(inputs, handle, idle)
    app.topics.add(raw_topic(*inputs))  # subscribes them; their records never reach a Stream
    return app
