"""The faust topology: two keyed stages over Kafka, state in changelog tables.

Stage 1 (key node) reads ``gpu.samples`` and ``gpu.events`` (keyed by node) and
``task.metrics.by-node`` (``task.metrics`` re-keyed from task id to node by a
small agent), runs :class:`streams.engine.NodeStage`, and produces transitions
to ``alerts`` (key fingerprint) and task summaries to ``task.summaries`` (key
task class: the repartition for stage 2). Stage 2 (key task class) reads
``task.summaries`` and runs :class:`streams.engine.ClassStage` for the
per-class baselines. Each stage keeps a faust Table (compacted changelog) of
per-key envelopes (see :mod:`streams.keyed`), written for the keys that changed
every ``engine.checkpoint_interval`` of wall time; input offsets are acknowledged
(so committed) only after the checkpoint that covers them.

faust costs ~130 µs per record, so values stay raw bytes (no faust.Record)
and agents take records in batches (``take_events``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import faust
from faust.types import TP

from gpuwarden.contract import (
    ContractError,
    GpuEvent,
    NodeSnapshot,
    TaskMetric,
    TaskSummary,
    Topics,
    encode,
)
from gpuwarden.kafka import broker_credentials
from streams.dlq import Inbound, Limits, Outbound, decode_inbound, to_dlq
from streams.keyed import KeyedRunner, Source

log = logging.getLogger("gpuwarden.streams")

BATCH_MAX = 2000
BATCH_WITHIN_S = 0.1
#: Quick takeover when a worker dies, yet tolerant of a slow batch (heartbeats
#: run on the same event loop). The broker's group.min.session.timeout.ms
#: (default 6 s) is the floor.
SESSION_TIMEOUT_S = 10.0
HEARTBEAT_INTERVAL_S = 2.0
COMMIT_INTERVAL_S = 1.0
#: Unacknowledged records held for the next checkpoint before one is forced: faust stops
#: delivering a stream whose buffer (``stream_buffer_maxsize``, 4096) holds unacked records,
#: so HOLD_MAX + BATCH_MAX must stay below it.
HOLD_MAX = 1500
BY_NODE_SUFFIX = ".by-node"
#: Producer and changelog-topic record size limit: a busy node's state envelope
#: is ~200 kB compressed, above a few hundred kB faust's 1 MB default gets close.
MAX_RECORD_BYTES = 16 << 20
#: Per-partition fetch size. faust merges its source topics in fetch order, not
#: event time; small fetches bound how far one topic runs ahead of another
#: while catching up on a backlog (see docs/streams-faust.md).
FETCH_BYTES = 256 << 10


def app_id(settings: Any) -> str:
    """One consumer group per fleet: workers with the same id share the partitions."""
    return f"{settings.kafka.topic_prefix}{settings.kafka.client_id}-streams"


def default_stages(settings: Any) -> tuple[Any, Any]:
    """The real engine stages, with the rules named in the config (else the default pack)."""
    from streams.engine import ClassStage, NodeStage
    from streams.rules import load_rules

    rules = load_rules(settings.engine.rules)
    return NodeStage(rules, settings.engine), ClassStage(rules, settings.engine)


def inbound(event: Any) -> Inbound:
    m = event.message
    return Inbound(m.topic, m.partition, m.offset, m.key, m.value)


def build_app(
    settings: Any, *, worker_id: str, data_dir: Path,
    node_stage: Any = None, class_stage: Any = None,
) -> faust.App:
    """The faust app for ``settings``; stages default to :func:`default_stages`."""
    if node_stage is None or class_stage is None:
        node_stage, class_stage = default_stages(settings)
    k = settings.kafka
    topics = Topics(k.topic_prefix)
    by_node = topics.metrics + BY_NODE_SUFFIX
    limits = Limits(int(settings.limits.max_record_bytes), float(settings.limits.max_future_skew))
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
        stream_wait_empty=False,
        table_standby_replicas=0,
        producer_acks=-1,
        producer_max_request_size=MAX_RECORD_BYTES,
        consumer_max_fetch_size=FETCH_BYTES,
        web_enabled=False,
        autodiscover=False,
    )

    def raw_topic(*names: str) -> faust.TopicT:
        return app.topic(*names, key_serializer="raw", value_serializer="raw",
                         partitions=k.partitions, internal=True)

    def state_table(name: str) -> faust.Table:
        # bytes key and value types make faust use the raw codec both ways (a
        # ``schema`` alone leaves recovery decoding JSON). The changelog partition
        # comes from the same murmur2 partitioner as the source records' keys.
        return app.Table(name, default=None, partitions=k.partitions, use_partitioner=True,
                         key_type=bytes, value_type=bytes,
                         extra_topic_configs={"max.message.bytes": str(MAX_RECORD_BYTES)})

    outputs = {
        name: raw_topic(name)
        for name in (topics.alerts, topics.summaries, by_node,
                     *(Topics.dlq(t) for t in (topics.samples, topics.events, topics.metrics,
                                               topics.summaries)))
    }
    node_table, class_table = state_table("node-state"), state_table("class-state")
    declared: list[bool] = []

    async def send_all(out: Iterable[Outbound], wait: bool) -> None:
        if not declared:
            for t in outputs.values():
                await t.maybe_declare()
            declared.append(True)
        futs = [await outputs[o.topic].send(key=o.key, value=o.value, force=True) for o in out]
        if wait and futs:
            await asyncio.gather(*futs)

    held: dict[str, list[Any]] = {"node-state": [], "class-state": []}

    async def apply(runner: KeyedRunner, table: faust.Table, events: list[Any]) -> None:
        """One batch; its offsets are held (not committable) until a checkpoint covers them."""
        waiting = held[table.name]
        # faust may still hand over records it fetched before a rebalance took their partition
        # away: the new owner applies them; here they would run on state this worker gave up.
        assigned = app.consumer.assignment()
        events = [e for e in events if e.message.tp in assigned]
        for e in events:
            e.message.incref()  # take_events' own ack then leaves the offset uncommitted
        waiting.extend(e.message for e in events)
        res = runner.run([inbound(e) for e in events], lambda key: table.get(key.encode()),
                         force=len(waiting) >= HOLD_MAX)
        # Outputs must be on the broker before the state that says they were made.
        await send_all(res.out, wait=True)
        if res.state:
            # Not ``table[key] = ...``: faust buffers that send and its pre-commit flush may
            # return before the buffer drained. Await delivery, then let the offsets commit.
            futs = []
            for key, envelope in res.state.items():
                table.data[key.encode()] = envelope
                futs.append(await table.changelog_topic.send(
                    key=key.encode(), value=envelope, key_serializer="raw", value_serializer="raw"))
            await asyncio.gather(*futs)
            for m in waiting:
                m.ack(app.consumer)
            waiting.clear()
            log.debug("%s checkpoint: %d keys, %d bytes, %s", table.name, len(res.state),
                     sum(map(len, res.state.values())), getattr(runner.stage, "counters", dict)())

    ranks = {topics.samples: 0, topics.events: 1, by_node: 2}

    behind_now: dict[int, frozenset] = {}  # per batch: partition -> ranks behind

    def behind(partition: int) -> frozenset:
        """Source ranks whose partition (the node's, inputs are co-partitioned) has records
        this worker has not processed yet: while catching up, the node waits for them."""
        got = behind_now.get(partition)
        if got is None:
            got = behind_now[partition] = _behind(partition)
        return got

    def _behind(partition: int) -> frozenset:
        consumer = app.consumer
        out = set()
        for topic, rank in ranks.items():
            key = TP(topic, partition)
            high = consumer.highwater(key)
            # Before this assignment delivered a record of the partition: faust's read offset
            # (the committed one); no high-water mark yet (not fetched): assume behind.
            pos = node_runner.position.get(f"{topic}:{partition}", consumer._read_offset.get(key))
            if high is None or high > (pos or 0):
                out.add(rank)
        if 2 not in out:  # task metrics also wait in task.metrics, before the re-key hop
            for tp in consumer.assignment():
                if tp.topic == topics.metrics:
                    high = consumer.highwater(tp)
                    if high is not None and high > rekey_position.get(tp.partition, high):
                        out.add(2)
                        break
        return frozenset(out)

    def emit_node(record: Any, msg: Inbound) -> list[Outbound]:
        out = node_stage.process(record, behind(msg.partition))
        return [*(Outbound(topics.alerts, t.fingerprint.encode(), encode(t)) for t in out.transitions),
                *(Outbound(topics.summaries, s.task.encode(), encode(s)) for s in out.summaries)]

    def emit_class(summary: TaskSummary, msg: Inbound) -> list[Outbound]:
        return [Outbound(topics.alerts, t.fingerprint.encode(), encode(t))
                for t in class_stage.process(summary)]

    def node_of(record: Any) -> str:
        return record.node

    def class_of(record: TaskSummary) -> str:
        return record.task

    node_runner = KeyedRunner(node_stage, {
        topics.samples: Source(NodeSnapshot, node_of, Topics.dlq(topics.samples)),
        topics.events: Source(GpuEvent, node_of, Topics.dlq(topics.events)),
        by_node: Source(TaskMetric, node_of, Topics.dlq(topics.metrics)),
    }, emit_node, limits, float(settings.engine.checkpoint_interval))
    class_runner = KeyedRunner(class_stage, {
        topics.summaries: Source(TaskSummary, class_of, Topics.dlq(topics.summaries)),
    }, emit_class, limits, float(settings.engine.checkpoint_interval))
    rekey_position: dict[int, int] = {}
    previous: set[TP] = set()

    @app.on_rebalance_complete.connect
    async def reassigned(sender: Any, **_: Any) -> None:
        """Keys of partitions this worker kept stay in memory; the others re-sync from the
        restored changelog. Held offsets of the old assignment are read again."""
        assigned = app.consumer.assignment()
        retained = frozenset(f"{tp.topic}:{tp.partition}" for tp in assigned & previous)
        previous.clear()
        previous.update(assigned)
        for runner in (node_runner, class_runner):
            runner.reassigned(retained)
        for waiting in held.values():
            waiting.clear()

    @app.agent(raw_topic(topics.metrics), name="metrics-by-node")
    async def rekey_metrics(stream: faust.StreamT) -> None:
        """task.metrics arrive keyed by task id; stage 1 needs them on the node's partition."""
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            out = []
            for e in events:
                msg = inbound(e)
                rekey_position[msg.partition] = msg.offset + 1
                try:
                    record = decode_inbound(msg, TaskMetric, limits)
                except ContractError as err:
                    out.append(to_dlq(msg, str(err)))
                else:
                    out.append(Outbound(by_node, record.node.encode(), msg.value or b""))
            # Awaited: faust's pre-commit flush can return before its send buffer drained.
            await send_all(out, wait=True)

    @app.agent(raw_topic(topics.samples, topics.events, by_node), name="node-stage")
    async def node_agent(stream: faust.StreamT) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            behind_now.clear()
            await apply(node_runner, node_table, events)

    @app.agent(raw_topic(topics.summaries), name="class-stage")
    async def class_agent(stream: faust.StreamT) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            await apply(class_runner, class_table, events)

    return app
