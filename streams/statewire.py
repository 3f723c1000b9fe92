"""Where a stream worker's keyed state lives on Kafka, named once for the topology and for what
writes it from outside (``gpuwarden baseline bootstrap --to-kafka``).

A faust table's changelog topic is ``<app_id>-<table>-changelog`` (faust's own naming); a key's
record goes to the partition the producers' default (murmur2) partitioner gives it over
``kafka.partitions``, the partition its source records have, so the worker that reads a task
class's summaries restores that class's envelope. An envelope with offsets ``{}`` claims no input
record: a worker loads it at the key's first record and applies every summary after it.
"""

from __future__ import annotations

from typing import Protocol

from aiokafka.partitioner import DefaultPartitioner

from gpuwarden.streams.keyed import pack

#: Stage 1's table (per node) and stage 2's (per task class): the topology's table names (the
#: web console reads their changelogs in cluster mode).
NODE_TABLE = "node-state"
CLASS_TABLE = "class-state"

_partitioner = DefaultPartitioner()


class Dumps(Protocol):
    def dump(self, key: str, /) -> bytes: ...


def changelog_topic(app_id: str, table: str) -> str:
    """faust's changelog topic name for ``table`` of the app ``app_id`` (``Table._changelog_topic_name``)."""
    return f"{app_id}-{table}-changelog"


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``: aiokafka's default (murmur2) partitioner."""
    every = list(range(partitions))
    return _partitioner(key, every, every)  # type: ignore[no-any-return]


def fresh_envelope(stage: Dumps, key: str) -> bytes:
    """``key``'s state in ``stage`` as an envelope that claims no input offsets (loaded by a
    worker at the key's first record, every record after it applied)."""
    return pack({}, stage.dump(key))
