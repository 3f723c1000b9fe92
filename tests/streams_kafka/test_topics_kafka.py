"""Topics come from the processes with ``kafka.partitions``, never from the broker's auto-creation.

The broker here (scripts/kafka-local) auto-creates topics with ``num.partitions=1``, as Kafka does
by default: an agent, collector or import that produced first, or a worker that subscribed first,
used to leave 1-partition topics behind (a 2-worker group with one worker idle; the version-skew
firing lost). Each order is tried with the real ``gpuwarden agent`` and ``gpuwarden streams``
processes; a topic that already exists with another count makes the worker exit 2 naming the
topics and their counts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from aiokafka.admin import AIOKafkaAdminClient

from gpuwarden.contract import Topics
from gpuwarden.streams.statewire import app_id, batchlog_topic, changelog_topic
from gpuwarden.topics import data_topics
from tests.kafka_support import REPO_ROOT, create_topic
from tests.streams_kafka.records import settings_for
from tests.streams_kafka.workers import Worker, group_members, wait_for, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 3


async def counts(bootstrap: str, names: list[str]) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics()) & set(names)
        return {d["topic"]: len(d["partitions"]) for d in await admin.describe_topics(sorted(existing))}
    finally:
        await admin.close()


def agent(config: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """``gpuwarden agent`` on simulated GPUs through 10 min of event time, publishing to Kafka."""
    cfg = yaml.safe_load(config.read_text())
    cfg["spool"] = {"path": str(tmp / "agent-spool.db")}
    path = tmp / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(path), "--simulate",
                           "mixed", "--nodes", "2", "--gpus", "2", "--duration", "10m"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("first", ["agent", "worker"])
async def test_agent_and_worker_in_either_order_make_every_topic_with_kafka_partitions(
        kafka_bootstrap: str, tmp_path: Path, first: str) -> None:
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    topics, app = Topics(settings.kafka.topic_prefix), app_id(settings)
    worker = None
    try:
        if first == "worker":
            worker = Worker(config, "w1", tmp_path)

            async def joined() -> bool:
                return await group_members(kafka_bootstrap, app) == 1

            await wait_for(joined, "the worker in its group")
        done = agent(config, tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "not found" not in done.stderr  # no produce to a topic that did not exist
        if worker is None:
            worker = Worker(config, "w1", tmp_path)

            async def joined_after() -> bool:
                return await group_members(kafka_bootstrap, app) == 1

            await wait_for(joined_after, "the worker in its group")
        assert worker.alive(), worker.tail()
    finally:
        if worker is not None:
            worker.stop()
    names = [*data_topics(topics), *(Topics.dlq(t) for t in (topics.samples, topics.events, topics.metrics)),
             changelog_topic(app, "node-state"), changelog_topic(app, "class-state"), batchlog_topic(app, "node")]
    got = await counts(kafka_bootstrap, names)
    assert got == dict.fromkeys(names, PARTITIONS), got


async def test_a_topic_made_with_another_count_stops_the_worker_with_the_names_and_counts(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS)
    topics = Topics(settings.kafka.topic_prefix)
    await create_topic(kafka_bootstrap, topics.events, partitions=1)  # e.g. auto-created by an old agent
    done = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "streams", "--config",
                           str(write_config(tmp_path / "gpuwarden.yaml", settings)), "--data-dir", str(tmp_path / "w")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"{topics.events} has 1" in done.stderr and f"{topics.samples} has {PARTITIONS}" in done.stderr
    assert "Repartitioning" in done.stderr and "Traceback" not in done.stderr
