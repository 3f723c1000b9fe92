"""The names a writer outside the workers (``baseline bootstrap --to-kafka``) and the web console
use are the runtime's: the class task restores what bootstrap writes where bootstrap writes it."""

from __future__ import annotations

from aiokafka.partitioner import DefaultPartitioner

from gpuwarden.contract import Topics
from gpuwarden.streams.groups import TaskFactory, groups
from gpuwarden.streams.statewire import CLASS_TABLE, MARKER, app_id, changelog_topic, partition_of
from gpuwarden.streams.task import TaskId
from tests.streams_kafka.records import settings_for


def test_the_class_state_changelog_and_partitions_are_the_runtime_s() -> None:
    settings = settings_for("127.0.0.1:1", partitions=6)
    topics = Topics(settings.kafka.topic_prefix)
    group = groups(topics)["class"]
    assert group.tables[0] == CLASS_TABLE  # the class task's first table: its snapshot marker sits there too
    task = TaskFactory(settings, dict.fromkeys([*groups(topics)["node"].inputs, topics.summaries, topics.sli,
                                                topics.jobs], 6))(TaskId("class", 2))
    assert list(task.tables) == [CLASS_TABLE]
    assert changelog_topic(app_id(settings), CLASS_TABLE) == f"{settings.kafka.topic_prefix}gpuwarden-streams-class-state-changelog"
    every = list(range(6))
    for key in (b"llm-pretrain", b"sd-finetune", b"\xe4\xb8\xad"):
        assert partition_of(key, 6) == DefaultPartitioner()(key, every, every)
    assert not MARKER.decode().isprintable()  # never a stage key: those are printable names
