"""The console's cluster-mode source: the topics the notifier and the stream workers keep, read into memory.

``web.source: kafka`` makes the console a reader of its own (no consumer group, nothing
committed) of, from the beginning of their retention:

* the ``alerts`` topic and, with ``notify.control: kafka``, the ``control`` topic: a console on
  any host shows the open alerts the notifier routes and the silences and acks it applies;
* the stream workers' node, class and inference tables (their compacted changelogs, named by
  the workers' app id: the same ``kafka.topic_prefix`` and ``kafka.client_id`` as theirs),
  each key's newest envelope loaded into an engine of the console's own, which only shows
  them: the fleet, the class baselines and the services' SLO windows are the workers' own.

A session that fails (Kafka unreachable, a probe unanswered) is retried every
:data:`RETRY_S`; the pages keep what was read before and say since when. A new session
reads from the beginning again and replaces the old view once it has caught up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from gpuwarden.app.settings import Settings
from gpuwarden.app.webstate import Fleet, assemble, class_rows, service_summaries
from gpuwarden.config import KafkaConfig
from gpuwarden.contract import AlertState, AlertTransition, ContractError, Topics, decode
from gpuwarden.humantime import moment
from gpuwarden.kafka import KafkaConnectError, kafka_kwargs, start_client
from gpuwarden.notifiers.control import ControlState, warn_each
from gpuwarden.notifiers.kafka import apply_record, ensure_control_topic
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.keyed import unpack
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.statewire import CLASS_TABLE, INFERENCE_TABLE, MARKER, NODE_TABLE, SERVICE_TABLE, app_id, \
    changelog_topic

RETRY_S = 5.0
#: How often a running session asks the broker for the end offsets; unanswered in
#: :data:`PROBE_TIMEOUT_S`, the session ends (the broker is away) and is retried.
PROBE_S = 5.0
PROBE_TIMEOUT_S = 10.0


class Keyed(Protocol):
    def load(self, key: str, data: bytes, /) -> None: ...

    def drop(self, key: str, /) -> None: ...


@dataclass
class Replica:
    """What one session has read: the open alerts, the control state, the workers' tables."""

    engine: Engine
    tables: dict[str, Keyed]
    """Changelog topic → the engine stage its envelopes load into."""
    control: ControlState = field(default_factory=ControlState)
    firing: dict[str, AlertTransition] = field(default_factory=dict)
    as_of: float = 0.0
    bad: int = 0  # records that broke the contract or envelopes in another format: skipped

    def apply(self, topics: Topics, r: ConsumerRecord) -> None:
        if r.topic == topics.control:
            warn_each([p] if (p := apply_record(self.control, r.key, r.value)) is not None else [])
        elif r.topic == topics.alerts:
            self._alert(r)
        elif r.key is not None and r.key != MARKER:  # a task's snapshot marker holds no stage state
            self._envelope(self.tables[r.topic], r.key.decode(errors="replace"), r.value, r.timestamp / 1000)

    def _alert(self, r: ConsumerRecord) -> None:
        try:
            t = decode(r.value or b"", AlertTransition)
        except ContractError:
            self.bad += 1
            return
        self.as_of = max(self.as_of, t.ts)
        if t.state == AlertState.FIRING:
            self.firing[t.fingerprint] = t
        else:
            self.firing.pop(t.fingerprint, None)

    def _envelope(self, stage: Keyed, key: str, value: bytes | None, written: float) -> None:
        """A key's newest state as a worker checkpointed it (None: the key was dropped)."""
        if value is None:
            stage.drop(key)
            return
        try:
            stage.load(key, unpack(value)[1])
        except ValueError:
            self.bad += 1
            return
        self.as_of = max(self.as_of, written)


async def partitions(kafka: KafkaConfig, topics: list[str]) -> dict[str, list[TopicPartition]]:
    """The partitions of those ``topics`` the broker has (a topic it lacks is left out: only
    listed topics are described, a broker that creates topics on a metadata request would
    otherwise create it with its default partitions)."""
    admin = AIOKafkaAdminClient(**kafka_kwargs(kafka))
    await admin.start()
    try:
        known = set(await admin.list_topics())
        described = await admin.describe_topics([t for t in topics if t in known]) if known & set(topics) else []
    finally:
        await admin.close()
    return {d["topic"]: [TopicPartition(d["topic"], p["partition"]) for p in sorted(d["partitions"],
                                                                                  key=lambda p: p["partition"])]
            for d in described if d["error_code"] == 0 and d["partitions"]}


class ClusterView:
    """The newest caught-up :class:`Replica` and a line saying how it stands (``status``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics(settings.kafka.topic_prefix)
        self.changelogs = [changelog_topic(app_id(settings), t)
                           for t in (NODE_TABLE, CLASS_TABLE, INFERENCE_TABLE, SERVICE_TABLE)]
        self.replica: Replica | None = None
        self.problem = f"connecting to Kafka at {settings.kafka.bootstrap}"
        self.missing: list[str] = []
        self.changed = asyncio.Event()  # set whenever a batch was applied

    def new_replica(self) -> Replica:
        s = self.settings
        engine = Engine(load_rules(s.engine.rules), s.engine, s.limits.max_past_skew)
        return Replica(engine, dict(zip(self.changelogs, (engine.nodes, engine.classes, engine.inference,
                                                          engine.services))))

    @property
    def status(self) -> str:
        """'' when the view is current; otherwise what the pages should say above everything."""
        if self.problem:
            return self.problem
        if self.missing:
            return (f"no topic {', '.join(self.missing)} on Kafka yet (no alert published, or no stream worker "
                    f"of app id {app_id(self.settings)} checkpointed that table): shown as empty")
        return ""

    async def run(self, stop: asyncio.Event) -> None:
        """Sessions until ``stop``; each failure is said in ``status`` and retried."""
        while not stop.is_set():
            try:
                await self._session(stop)
            except (KafkaError, KafkaConnectError, OSError, TimeoutError, asyncio.CancelledError) as e:
                me = asyncio.current_task()
                if isinstance(e, asyncio.CancelledError) and (me is None or me.cancelling()):
                    raise  # we are being stopped; otherwise a probe timed out as the broker went away
                kept = "" if self.replica is None else \
                    f"; showing what was read up to {moment(self.replica.as_of, self.settings.notify.timezone)}"
                why = "no answer" if isinstance(e, (asyncio.CancelledError, TimeoutError)) else str(e) or type(e).__name__
                self.problem = (f"Kafka at {self.settings.kafka.bootstrap} unreachable ({why})"
                                f"{kept}; retrying every {RETRY_S:g} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RETRY_S)

    async def _session(self, stop: asyncio.Event) -> None:
        kw = kafka_kwargs(self.settings.kafka)
        # read_committed: what an aborted transaction of a worker wrote is not state, nor an alert
        consumer = AIOKafkaConsumer(**kw, enable_auto_commit=False, isolation_level="read_committed")
        await start_client(consumer, kw)
        try:
            parts = await ensure_control_topic(self.settings.kafka) if self.settings.notify.control == "kafka" else []
            wanted = [self.topics.alerts, *self.changelogs]
            found = await partitions(self.settings.kafka, wanted)
            parts += [p for ps in found.values() for p in ps]
            self.missing = [t for t in wanted if t not in found]
            if not parts:
                self.replica, self.problem = self.new_replica(), ""
                await self._until_topics_appear(consumer, stop)
                return
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            await self._follow(consumer, parts, stop)
        finally:
            await asyncio.wait_for(consumer.stop(), PROBE_TIMEOUT_S)

    async def _follow(self, consumer: AIOKafkaConsumer, parts: list[TopicPartition], stop: asyncio.Event) -> None:
        """Apply batches; the new replica replaces the shown one once it reached the end offsets
        seen at the start. Returns (to start over) when a missing topic appears."""
        replica = self.new_replica()
        ends = await consumer.end_offsets(parts)
        caught = False
        probed = asyncio.get_running_loop().time()
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=500, max_records=2000)
            for records in batch.values():
                for r in records:
                    replica.apply(self.topics, r)
            if not caught and all([await consumer.position(p) >= ends[p] for p in parts]):
                caught, self.replica, self.problem = True, replica, ""
            if batch and caught:
                self.changed.set()
            if asyncio.get_running_loop().time() - probed >= PROBE_S:
                probed = asyncio.get_running_loop().time()
                await asyncio.wait_for(consumer.end_offsets(parts), PROBE_TIMEOUT_S)  # the broker still answers
                if self.missing and await asyncio.wait_for(partitions(self.settings.kafka, self.missing),
                                                           PROBE_TIMEOUT_S):
                    return

    async def _until_topics_appear(self, consumer: AIOKafkaConsumer, stop: asyncio.Event) -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROBE_S)
            if await asyncio.wait_for(partitions(self.settings.kafka, self.missing), PROBE_TIMEOUT_S):
                return

    def fleet(self, wall_now: float, control: ControlState) -> Fleet:
        """The pages' state from the newest caught-up replica (empty before the first one), with
        ``control``'s silences and acks."""
        r = self.replica or self.new_replica()
        source = (f"Kafka at {self.settings.kafka.bootstrap}: {self.topics.alerts}"
                  + (f", {self.topics.control}" if self.settings.notify.control == "kafka" else "")
                  + f" and the stream workers' tables (app {app_id(self.settings)})")
        if r.bad:
            source += f"; {r.bad} records skipped (not of the contract, or state in another format)"
        return assemble(self.settings, r.engine, r.firing, control, wall_now,
                        Fleet(source, r.as_of, [], class_rows(r.engine), [], [], services=service_summaries(r.engine),
                              banner=self.status))

    async def has(self, seen: Callable[[Replica], bool], timeout_s: float = 10.0) -> bool:
        """Wait until the view shows what was just written (a silence, an ack): a page drawn
        after a write then shows it. False when it did not arrive in ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.replica is None or not seen(self.replica):
            left = deadline - loop.time()
            if left <= 0:
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 0.5))
        return True
