"""``gpuwarden baseline bootstrap``: task-class baselines from history, so a site does not wait
``engine.observation_period`` (14 days) of "learning" before its first deviation alert.

Sources: a Prometheus that already scrapes dcgm-exporter or gpuwarden agents (history's
:mod:`gpuwarden.history.prometheus` rebuilds the task summaries), a recording (``--from-file``,
``run --record`` or ``agent --output``) or a spool (``--spool``), whose records go through stage 1 to
make the summaries. Stage 2 (the streams' ``ClassStage``) learns from them in time order, and the
classes' state is saved where ``gpuwarden run`` restores it (the spool of this config); node state
is not kept (only the baselines are history's to give). A report says, per class, the hours found
and whether it still learns, and why. ``--to-kafka`` writes the classes to the stream workers'
class-state changelog instead (a ``gpuwarden streams`` site; docs/engine.md).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from gpuwarden.app.settings import Settings
from gpuwarden.app.standalone import LIVE_STATE, STATE_NS, Runner
from gpuwarden.contract import TaskSummary, Topics
from gpuwarden.humantime import span
from gpuwarden.history.prometheus import PromClient, PrometheusError, summaries
from gpuwarden.history.sources import ReplayError, read_file, read_spool, spool_path, time_range
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine, StageOutput
from gpuwarden.streams.rules import RulesError, load_rules


def _from_records(engine: Engine, records: Iterable) -> list[TaskSummary]:
    """Stage 1 over the records: the summaries it makes (its alerts are not this command's)."""
    out = StageOutput([], [])
    for r in records:
        engine.nodes.process(r, out=out)
        out.transitions.clear()
    out.summaries.extend(engine.nodes.flush().summaries)
    return out.summaries


def _report(engine: Engine, sums: list[TaskSummary], interval: float) -> str:
    windows: dict[str, set[float]] = defaultdict(set)
    for s in sums:
        windows[s.task].add(s.ts)
    cfg = engine.config
    lines = [f"{len(sums)} task summaries ({span(interval)} windows) for {len(windows)} task classes:"]
    for cls in sorted(windows):
        ends = sorted(windows[cls])
        covered = len(ends) * interval
        util = engine.classes.baseline(cls).get("util_gpu")
        if util is not None:
            state = f"baseline util {util.median:.0f} % ({util.low:.0f}-{util.high:.0f})"
        elif ends[-1] - ends[0] < cfg.observation_period:
            state = (f"still learning: {span(ends[-1] - ends[0])} of history, the observation "
                     f"period is {span(cfg.observation_period)}")
        else:
            state = f"still learning: fewer than {cfg.baseline_min_samples} summaries without an alert"
        lines.append(f"  {cls}: {span(covered)}; {state}")
    return "\n".join(lines) + "\n"


def _summaries(args: argparse.Namespace, settings: Settings, engine: Engine, since: float | None,
               until: float) -> list[TaskSummary]:
    """The task summaries of the source; raises PrometheusError or ReplayError."""
    if args.from_prometheus:
        client = PromClient(args.from_prometheus)
        try:
            return summaries(client, since=since or until - 14 * 86400, until=until,
                             step=float(args.step or settings.engine.bucket),
                             interval=float(settings.engine.summary_interval), class_label=args.class_label)
        finally:
            client.close()
    if args.from_file:
        return _from_records(engine, read_file(args.from_file, since, until))
    with Spool(spool_path(args.spool)) as source:
        return _from_records(engine, read_spool(source, since, until, topic_prefix=settings.kafka.topic_prefix))


def _learn(engine: Engine, sums: list[TaskSummary]) -> None:
    """Stage 2 over the summaries in time order; stage 1's node state is not kept."""
    for n in engine.nodes.nodes():
        engine.nodes.drop(n)
    for s in sorted(sums, key=lambda s: (s.ts, s.node, s.task_id)):
        engine.classes.process(s)
    engine.classes.flush()


def cmd_bootstrap(args: argparse.Namespace, settings: Settings) -> int:
    """Exit 0 with the state saved; 1 when the source (or Kafka) fails; 2 for bad input or a state
    in the way."""
    try:
        rules = load_rules(settings.engine.rules)
        since, until = time_range(args.since, args.until, time.time())
    except (RulesError, ReplayError) as e:
        return _failed(e, 2)
    until = until or time.time()
    engine = Engine(rules, settings.engine, settings.limits.max_past_skew)
    interval = float(settings.engine.summary_interval)
    if args.to_kafka:
        return _bootstrap_kafka(args, settings, engine, since, until)
    with Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age) as spool:
        if spool.kv_get(STATE_NS, LIVE_STATE) is not None and not args.replace:
            print("gpuwarden baseline bootstrap: this spool already holds live engine state (baselines "
                  "learned live); --replace drops it for the bootstrapped one", file=sys.stderr)
            return 2
        sums = _learned(args, settings, engine, since, until)
        if isinstance(sums, int):
            return sums
        runner = Runner(engine, spool, Topics(settings.kafka.topic_prefix), json_out=None, record=None,
                        notifier=None, state_key=LIVE_STATE)
        runner.now = max((s.ts for s in sums), default=since or 0.0)
        runner.save()
    sys.stdout.write(_report(engine, sums, interval))
    print(f"saved the classes' state in {settings.spool.path} (gpuwarden run continues from it)", file=sys.stderr)
    return 0


def _failed(error: Exception, code: int) -> int:
    """Say why the bootstrap stops (the error names the source and the problem) and give its exit code."""
    print(f"gpuwarden baseline bootstrap: {error}", file=sys.stderr)
    return code


def _learned(args: argparse.Namespace, settings: Settings, engine: Engine, since: float | None,
             until: float) -> list[TaskSummary] | int:
    """The history's task summaries, learned by the engine's class stage; or the exit code when
    the history cannot be read (1: Prometheus away or refusing, 2: a bad file or spool)."""
    try:
        sums = _summaries(args, settings, engine, since, until)
    except PrometheusError as e:
        return _failed(e, 1)
    except ReplayError as e:
        return _failed(e, 2)
    _learn(engine, sums)
    return sums


def _bootstrap_kafka(args: argparse.Namespace, settings: Settings, engine: Engine, since: float | None,
                     until: float) -> int:
    """``--to-kafka``: the classes' envelopes onto the stream workers' class-state changelog
    (the spool is not written: a cluster's workers restore from the changelog only)."""
    from gpuwarden.kafka import KafkaConnectError

    sums = _learned(args, settings, engine, since, until)
    if isinstance(sums, int):
        return sums
    sys.stdout.write(_report(engine, sums, float(settings.engine.summary_interval)))
    classes = sorted({s.task for s in sums})
    if not classes:
        print("gpuwarden baseline bootstrap: no task summaries in the source: nothing written to Kafka",
              file=sys.stderr)
        return 2
    try:
        lines = asyncio.run(write_classes(settings, engine.classes, classes, replace=args.replace))
    except ClassLogError as e:
        return _failed(e, 2)
    except KafkaConnectError as e:
        return _failed(e, 1)
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    return 0


class ClassLogError(Exception):
    """The changelog cannot take the bootstrapped classes (state in the way, a topic that differs)."""


#: How long to wait for a topic just created to report its partitions, and to read the changelog.
_METADATA_S = 10.0
_READ_S = 60.0


async def _ensure_changelog(admin: Any, topic: str, settings: Settings) -> int:
    """Create the class-state changelog as a worker would (compacted, ``kafka.partitions``
    partitions, the workers' record size limit) unless it is there; returns its partition count."""
    from aiokafka.admin import NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    from gpuwarden.streams.statewire import CHANGELOG_CONFIG

    k = settings.kafka
    if topic not in set(await admin.list_topics()):
        try:
            await admin.create_topics([NewTopic(
                topic, num_partitions=k.partitions, replication_factor=k.replication_factor,
                topic_configs=CHANGELOG_CONFIG)])
        except TopicAlreadyExistsError:
            pass  # a worker made it meanwhile
    deadline = time.monotonic() + _METADATA_S
    while True:
        (found,) = await admin.describe_topics([topic])
        if found["error_code"] == 0 and found["partitions"]:
            return len(found["partitions"])
        if time.monotonic() > deadline:
            raise ClassLogError(f"{topic}: no partitions reported within {_METADATA_S:g} s "
                                f"(error code {found['error_code']})")
        await asyncio.sleep(0.1)


async def _members(admin: Any, group: str) -> int:
    """How many consumers the group ``group`` has now (0 when it does not exist)."""
    (resp,) = await admin.describe_consumer_groups([group])
    found = [g for g in resp.to_object()["groups"] if g["group"] == group]
    return len(found[0]["members"]) if found else 0


async def _latest(kw: dict[str, Any], topic: str, partitions: int) -> dict[str, bytes]:
    """The changelog's latest value per key now (keys whose latest is a tombstone left out)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from gpuwarden.kafka import start_client
    from gpuwarden.streams.statewire import MARKER

    consumer = AIOKafkaConsumer(**kw, enable_auto_commit=False, isolation_level="read_committed")
    await start_client(consumer, kw)
    latest: dict[str, bytes | None] = {}
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        end = await consumer.end_offsets(tps)
        left = {tp for tp in tps if end[tp] > 0}
        async with asyncio.timeout(_READ_S):
            while left:
                for tp, batch in (await consumer.getmany(*left, timeout_ms=500)).items():
                    for r in batch:
                        if r.key is not None and r.key != MARKER:  # a task's snapshot marker: no class
                            latest[r.key.decode(errors="replace")] = r.value
                    if batch and batch[-1].offset + 1 >= end[tp]:
                        left.discard(tp)
                for tp in list(left):  # compaction can leave the end offset past the last record
                    if await consumer.position(tp) >= end[tp]:
                        left.discard(tp)
    finally:
        await consumer.stop()
    return {key: value for key, value in latest.items() if value is not None}


def _held(envelope: bytes) -> str:
    """What a stored envelope says about who wrote it."""
    from gpuwarden.streams.keyed import unpack

    try:
        offsets, _ = unpack(envelope)
    except ValueError:
        return "state in another format"
    if not offsets:
        return "a bootstrap's state, no summary applied since"
    return f"workers' state through {len(offsets)} summaries partition(s)"


async def write_classes(settings: Settings, stage: Any, classes: list[str], *, replace: bool) -> list[str]:
    """Write each class's envelope (offsets ``{}``) to the workers' class-state changelog, keyed
    by the class and on the partition the workers read it from; returns a line per class.

    Raises :class:`ClassLogError` (nothing written) when the workers' consumer group has members
    (running workers would not load it and would write over it), when the changelog already holds
    state for any of ``classes`` and not ``replace``, or its partition count is not ``kafka.partitions``."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient

    from gpuwarden.kafka import client_kwargs, start_client
    from gpuwarden.streams.statewire import CLASS_TABLE, COMPRESSION, MAX_RECORD_BYTES, app_id, changelog_topic, \
        fresh_envelope, partition_of

    kw = client_kwargs(settings)
    topic = changelog_topic(app_id(settings), CLASS_TABLE)
    group = app_id(settings)
    admin = AIOKafkaAdminClient(**kw)
    await start_client(admin, kw)
    try:
        members = await _members(admin, group)
        if members:
            raise ClassLogError(
                f"{members} stream worker(s) in the group {group} are running: stop them, bootstrap, then "
                "start them (a running worker reads the changelog only when partitions are assigned, and "
                "writes its own state of a class over the bootstrapped one at its next checkpoint); "
                "nothing written")
        partitions = await _ensure_changelog(admin, topic, settings)
    finally:
        await admin.close()
    if partitions != settings.kafka.partitions:
        raise ClassLogError(f"{topic} has {partitions} partitions, kafka.partitions is "
                            f"{settings.kafka.partitions}: the workers would not find the classes where "
                            "this writes them (use the workers' config)")
    stored = await _latest(kw, topic, partitions)
    held = [c for c in classes if c in stored]
    if held and not replace:
        raise ClassLogError(
            f"{topic} already holds state for {len(held)} of the {len(classes)} classes: "
            + "; ".join(f"{c} ({_held(stored[c])})" for c in held)
            + ". --replace overwrites it; nothing written")
    producer = AIOKafkaProducer(**kw, acks="all", enable_idempotence=True,
                                max_request_size=MAX_RECORD_BYTES, compression_type=COMPRESSION)
    await start_client(producer, kw)
    lines = []
    try:
        futs = []
        for cls in classes:
            key, envelope = cls.encode(), fresh_envelope(stage, cls)
            part = partition_of(key, partitions)
            futs.append(await producer.send(topic, envelope, key=key, partition=part))
            lines.append(f"  {cls}: {len(envelope)} bytes to {topic} partition {part}"
                         + (f" (replaced {_held(stored[cls])})" if cls in stored else ""))
        for f in futs:
            await f
    finally:
        await producer.stop()
    return [f"wrote {len(classes)} classes' state to {topic} (stream workers load it at each class's "
            "next summary):", *lines]
