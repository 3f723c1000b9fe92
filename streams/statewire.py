"""Where a stream worker's state lives on Kafka, named once for the runtime and for what reads or
writes it from outside (``gpuwarden baseline bootstrap --to-kafka``, the web console).

Per stage table a compacted changelog topic ``<app_id>-<table>-changelog`` holds each key's latest
envelope (:mod:`gpuwarden.streams.keyed`), on the partition the producers' default (murmur2)
partitioner gives the key over the task count: the partition its source records have, so the task
that reads a key's records restores its envelope. A task's snapshot marker (:data:`MARKER`) sits
in its group's first table's changelog; its batch log in ``<app_id>-<group>-batchlog``
(:mod:`gpuwarden.streams.batchlog`). An envelope with offsets ``{}`` claims no input record: a task
loads it and applies every record after it.
"""

from __future__ import annotations

from typing import Protocol

from aiokafka.partitioner import DefaultPartitioner

from gpuwarden.config import CommonSettings
from gpuwarden.streams.keyed import pack

#: The stage tables: stage 1 (per node), stage 2 (per task class), the inference stage (per node),
#: the service stage (per service) and the scheduler stage (per cluster).
NODE_TABLE = "node-state"
CLASS_TABLE = "class-state"
INFERENCE_TABLE = "inference-state"
SERVICE_TABLE = "service-state"
SCHED_TABLE = "scheduler-state"
#: The key of a task's snapshot marker in its first table's changelog (never a stage key: those
#: are node, class, service and cluster names, which the contract keeps printable).
MARKER = b"\x00gw-snapshot"
#: Changelog, batch-log and dead-letter record size limit: a busy node's envelope is ~200 kB
#: compressed; a dead letter holds a record of up to ``limits.max_record_bytes`` (≤ 8 MiB) in base64.
MAX_RECORD_BYTES = 16 << 20
#: The workers' outputs are compressed (dead letters hold base64 JSON: ~4x smaller).
COMPRESSION = "zstd"

#: Topic configs: a changelog keeps each key's latest envelope (segments roll hourly, so the
#: cleaner compacts what a restore reads); a batch log needs only what came since the last
#: snapshot (minutes), kept a day.
CHANGELOG_CONFIG = {"cleanup.policy": "compact", "max.message.bytes": str(MAX_RECORD_BYTES), "segment.ms": "3600000"}
BATCHLOG_CONFIG = {"cleanup.policy": "delete", "retention.ms": str(86_400_000), "segment.ms": "3600000",
                   "max.message.bytes": str(MAX_RECORD_BYTES)}
DLQ_CONFIG = {"max.message.bytes": str(MAX_RECORD_BYTES)}

_partitioner = DefaultPartitioner()


class Dumps(Protocol):
    def dump(self, key: str, /) -> bytes: ...


def app_id(settings: CommonSettings) -> str:
    """One consumer group per fleet: workers with the same id share the tasks."""
    return f"{settings.kafka.topic_prefix}{settings.kafka.client_id}-streams"


def changelog_topic(app: str, table: str) -> str:
    """The changelog topic of ``table`` of the workers of group ``app``."""
    return f"{app}-{table}-changelog"


def batchlog_topic(app: str, group: str) -> str:
    """The batch log of stage group ``group`` (``node``, ``class``, ``service``, ``cluster``)."""
    return f"{app}-{group}-batchlog"


def transactional_id(app: str, task: object) -> str:
    """One per task: a new owner's producer fences the old owner's (Kafka's zombie fencing)."""
    return f"{app}-{task}"


def partition_of(key: bytes, partitions: int) -> int:
    """The partition of ``key`` among ``partitions``: aiokafka's default (murmur2) partitioner."""
    every = list(range(partitions))
    return _partitioner(key, every, every)  # type: ignore[no-any-return]


def fresh_envelope(stage: Dumps, key: str) -> bytes:
    """``key``'s state in ``stage`` as an envelope that claims no input offsets (loaded by a
    worker at the key's first record, every record after it applied)."""
    return pack({}, stage.dump(key))
