"""The names a writer outside the workers (``baseline bootstrap --to-kafka``) uses are the topology's."""

from __future__ import annotations

from pathlib import Path

from aiokafka.partitioner import DefaultPartitioner

from gpuwarden.app.settings import validate_settings
from gpuwarden.streams.statewire import CLASS_TABLE, changelog_topic, partition_of
from gpuwarden.streams.topology import Topology, app_id


def test_the_class_state_changelog_and_partitions_are_the_topologys(tmp_path: Path) -> None:
    settings = validate_settings({"kafka": {"topic_prefix": "site.", "partitions": 6}})
    topology = Topology(settings, worker_id="w", data_dir=tmp_path)
    assert topology.class_table.name == CLASS_TABLE
    assert topology.class_table.changelog_topic.get_topic_name() == changelog_topic(app_id(settings), CLASS_TABLE)
    every = list(range(6))
    for key in (b"sd-finetune", b"llama-pretrain", b"", "vllm-serve-\u00e9".encode()):
        assert topology._partition(key) == partition_of(key, 6) == DefaultPartitioner()(key, every, every)
