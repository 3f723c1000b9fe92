"""``gpuwarden streams``: one stream worker of the group (:mod:`gpuwarden.streams.runtime`).

Workers started with the same config join one consumer group and share its tasks; each restores
the state of the tasks it is given from their changelogs and batch logs, so a worker may be killed
and restarted (or replaced) at any time. Before joining, the worker creates the topics it reads
and writes (``kafka.partitions``; never the broker's auto-creation) and refuses to start, exit 2,
when a stage's co-partitioned topics disagree in their partition counts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from gpuwarden.streams.config import StreamsSettings

log = logging.getLogger("gpuwarden.streams")


def cmd_streams(args: argparse.Namespace, settings: StreamsSettings) -> int:
    """Run a worker until SIGINT/SIGTERM."""
    return asyncio.run(_main(args, settings))


async def _main(args: argparse.Namespace, settings: StreamsSettings) -> int:
    from aiokafka.admin import AIOKafkaAdminClient

    from gpuwarden.contract import Topics
    from gpuwarden.deadletter import UnsentLog
    from gpuwarden.exposition import serve_from
    from gpuwarden.kafka import KafkaConnectError, client_kwargs, diagnose, ensure_topics, start_client
    from gpuwarden.streams import statewire as sw
    from gpuwarden.streams.groups import TaskFactory, groups, outputs
    from gpuwarden.streams.memory import tune_gc
    from gpuwarden.streams.runtime import Runtime
    from gpuwarden.streams.telemetry import StreamMetrics
    from gpuwarden.topics import TopicSpec, partition_mismatch

    kafka = settings.kafka
    kw = client_kwargs(settings)
    why = await diagnose(kw)  # aiokafka retries a refused login forever
    if why:
        raise KafkaConnectError(f"Kafka {kafka.bootstrap}: {why}")
    worker_id = args.worker_id or f"{socket.gethostname()}-{os.getpid()}"
    data_dir = Path(args.data_dir or Path("var") / "streams" / worker_id)
    data_dir.mkdir(parents=True, exist_ok=True)
    topics, app = Topics(kafka.topic_prefix), sw.app_id(settings)
    gs = groups(topics)
    own = {g.name: (*(sw.changelog_topic(app, t) for t in g.tables), sw.batchlog_topic(app, g.name))
           for g in gs.values()}
    specs = {t: TopicSpec() for g in gs.values() for t in g.inputs}
    specs |= {t: TopicSpec(config=sw.DLQ_CONFIG if t.endswith(".dlq") else {}) for t in outputs(topics)}
    counts = await ensure_topics(kw, specs, partitions=kafka.partitions, replication_factor=kafka.replication_factor)
    wrong = partition_mismatch(counts, [g.inputs for g in gs.values()])
    if not wrong:  # each group's changelogs and batch log: as many partitions as its inputs
        mine = {t: TopicSpec(counts[g.inputs[0]], sw.CHANGELOG_CONFIG if t.endswith("-changelog") else sw.BATCHLOG_CONFIG)
                for g in gs.values() for t in own[g.name]}
        counts |= await ensure_topics(kw, mine, partitions=kafka.partitions,
                                      replication_factor=kafka.replication_factor)
        wrong = partition_mismatch(counts, [(*g.inputs, *own[g.name]) for g in gs.values()])
    if wrong:
        print("gpuwarden streams: a stage's topics must have one partition count (docs/kafka.md, "
              "\"Repartitioning\"):\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 2
    admin = AIOKafkaAdminClient(**kw)
    await start_client(admin, kw)
    try:
        limits = await _max_message_bytes(admin, [*outputs(topics), *(t for ts in own.values() for t in ts)])
    finally:
        await admin.close()
    metrics = StreamMetrics()
    try:
        serve_from(metrics.registry, settings.engine, getattr(args, "metrics_port", None), ready=metrics.ready)
    except OSError as e:  # the port taken, or an address not on this host
        print(f"gpuwarden streams: cannot serve /metrics on {settings.engine.metrics_bind}: {e.strerror or e}",
              file=sys.stderr)
        return 1
    e = settings.engine
    runtime = Runtime(app=app, client_kw={**kw, "client_id": f"{kafka.client_id}-{worker_id}"}, topics=topics,
                      groups=gs, outputs=outputs(topics), limits=limits, factory=TaskFactory(settings, counts),
                      metrics=metrics, unsent=UnsentLog(data_dir / "unsent.jsonl"), commit_s=float(e.commit_interval),
                      snapshot_s=float(e.snapshot_interval), snapshot_records=e.snapshot_records)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, _print_stacks, runtime)
    log.warning("streams worker %s: group %s, broker %s, data dir %s", worker_id, app, kafka.bootstrap, data_dir)
    tune_gc()
    await runtime.run(stop)
    return 0


async def _max_message_bytes(admin: object, names: list[str]) -> dict[str, int]:
    """Each topic's ``max.message.bytes`` (what the broker takes in one record batch)."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    out: dict[str, int] = {}
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, t) for t in names])  # type: ignore[attr-defined]
    for resp in responses:
        for _err, _msg, _rtype, name, entries in resp.resources:
            for entry in entries:
                if entry[0] == "max.message.bytes":
                    out[name] = int(entry[1])
    return out


def _print_stacks(runtime: object) -> None:
    """SIGUSR1: every asyncio task's awaiting chain and the runtime's tasks on stderr (what a
    stalled worker is waiting on)."""
    for line in runtime.describe():  # type: ignore[attr-defined]
        print(line, file=sys.stderr)
    for task in asyncio.all_tasks():
        print(f"--- {task.get_name()}", file=sys.stderr)
        coro: object = task.get_coro()
        while coro is not None:
            frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
            if frame is not None:
                print(f"  {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}", file=sys.stderr)
            coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    sys.stderr.flush()
