"""Records the broker deleted before a worker read them are named, not passed over in silence.

A worker down longer than its inputs' retention comes back to committed offsets the broker no
longer has: aiokafka moves the position to the log's start and says so at INFO only, and the
alerts those records would have raised are missing. Here on a real broker: a worker applies some
snapshots and stops; more are sent and the first of them deleted (``delete_records``, what
retention does to a segment); a worker started again must log one WARNING naming the topic, the
partition and how many records it lost, and count them on ``/metrics``.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from gpuwarden.contract import Topics
from gpuwarden.kafka import ensure_topics
from gpuwarden.streams.statewire import app_id
from gpuwarden.topics import data_topics
from tests.kafka_support import produce
from tests.streams_kafka.records import keyed, settings_for, snapshot
from tests.streams_kafka.workers import end_offsets, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

BEFORE, SENT, DELETED = 20, 30, 18  # applied before the stop; sent while it is down; of those deleted


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def committed(bootstrap: str, group: str, tp: TopicPartition) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        got = await admin.list_consumer_group_offsets(group, partitions=[tp])
    finally:
        await admin.close()
    return got[tp].offset if tp in got else -1


async def test_records_deleted_unread_are_logged_and_counted(kafka_bootstrap: str, tmp_path: Path) -> None:
    port = free_port()
    settings = settings_for(kafka_bootstrap, partitions=1, metrics_port=port)
    topics, group = Topics(settings.kafka.topic_prefix), app_id(settings)
    tp = TopicPartition(topics.samples, 0)
    config = write_config(tmp_path / "gw.yaml", settings)
    now = time.time() - 600
    snaps = [snapshot("gn1", i, now + 10 * i) for i in range(BEFORE + SENT)]

    async def applied(n: int) -> bool:
        return await committed(kafka_bootstrap, group, tp) >= n

    await ensure_topics({"bootstrap_servers": kafka_bootstrap}, data_topics(topics), partitions=1, replication_factor=1)
    with workers(config, tmp_path, "w1"):
        await produce(kafka_bootstrap, topics.samples, keyed(snaps[:BEFORE]))
        await wait_for(lambda: applied(BEFORE), f"the first {BEFORE} snapshots committed")

    await produce(kafka_bootstrap, topics.samples, keyed(snaps[BEFORE:]))
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        await admin.delete_records({tp: RecordsToDelete(BEFORE + DELETED)})
    finally:
        await admin.close()
    end = (await end_offsets(kafka_bootstrap, topics.samples, 1))[0]
    assert end == BEFORE + SENT

    with workers(config, tmp_path, "w2") as (w2,):
        await wait_for(lambda: applied(end), "the snapshots left committed")
        lines = [line for line in w2.log.read_text(errors="replace").splitlines() if "deleted by the broker" in line]
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    assert len(lines) == 1, w2.tail()
    assert "WARNING" in lines[0] and f"{topics.samples} partition 0: {DELETED} records" in lines[0], lines[0]
    count = f'gpuwarden_streams_deleted_unread_total{{partition="0",topic="{topics.samples}"}} {float(DELETED)}'
    assert count in metrics, [m for m in metrics.splitlines() if "deleted_unread" in m]
