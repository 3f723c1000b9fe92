"""A task: one partition index of a stage group's co-partitioned inputs, processed purely.

Kafka Streams' unit of work, here without Kafka: the runtime (:mod:`gpuwarden.streams.runtime`)
hands a task :class:`Batch` es of its partitions' records and sends what :meth:`Task.apply`
returns in the task's transaction. Everything ``apply`` does is a function of the task's state
and the batch (its records, which inputs still had records on the broker, the wall clock the
records are judged plausible against), so a batch log replayed on a snapshot rebuilds exactly
the state the crashed owner had (:mod:`gpuwarden.streams.batchlog`). Progress reports
(:meth:`Task.reports`) change no state and are left out of that.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuwarden.streams.dlq import Consumed, Outbound
from gpuwarden.streams.keyed import KeyedRunner
from gpuwarden.contract import StageProgress, encode
from gpuwarden.streams.progress import HEADERS, Reporter, is_progress


@dataclass(frozen=True, order=True)
class TaskId:
    """A stage group (``node``, ``class``, ``service``, ``cluster``) and a partition index."""

    group: str
    partition: int

    def __str__(self) -> str:
        return f"{self.group}-{self.partition}"

    @classmethod
    def parse(cls, text: str) -> "TaskId":
        group, _, partition = text.rpartition("-")
        return cls(group, int(partition))


class Record(Consumed, Protocol):
    """What a task reads of a consumed record beyond the boundary's fields."""

    @property
    def timestamp(self) -> int: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes]]: ...


@dataclass(frozen=True)
class Batch:
    """A task's records of one round, by input topic in offset order; ``beyond``: the inputs with
    records on the broker past them (catching up); ``now``: the wall clock, epoch seconds."""

    records: Mapping[str, Sequence[Record]]
    beyond: frozenset[str]
    now: float


class Task:
    """The common part of the four task kinds: their id, inputs and tables (name → runner)."""

    def __init__(self, tid: TaskId, inputs: tuple[str, ...], tables: dict[str, KeyedRunner]) -> None:
        self.id = tid
        self.inputs = inputs
        self.tables = tables
        self.beyond: frozenset[str] = frozenset()

    def apply(self, batch: Batch) -> list[Outbound]:
        raise NotImplementedError

    def holding(self) -> bool:
        """Whether an empty batch may release something (records held for an input behind)."""
        return False

    def reports(self, wall: float) -> list[Outbound]:
        """Progress reports due at monotonic time ``wall``; they change no state."""
        return []

    def dump(self) -> dict[str, Any]:
        """The task's own state beside its keys' (gates, what it has read from), for a snapshot."""
        return {"beyond": sorted(self.beyond)}

    def load(self, data: Mapping[str, Any]) -> None:
        self.beyond = frozenset(data.get("beyond", ()))

    def keys(self) -> int:
        return sum(len(r.keys()) for r in self.tables.values())


def digest(out: Sequence[Outbound]) -> tuple[int, int]:
    """(count, CRC-32) of a batch's outputs other than progress reports: a replay that makes
    other outputs than the run it replays is seen at once (docs/streams-kafka.md)."""
    crc, n = 0, 0
    for o in out:
        if not is_progress(o.headers):
            n += 1
            crc = zlib.crc32(o.value, zlib.crc32(o.key or b"", zlib.crc32(o.topic.encode(), crc)))
    return n, crc


def report(reporter: Reporter, wall: float, topic: str, partitions: int, progress: StageProgress) -> list[Outbound]:
    """``progress`` to every partition of ``topic`` when ``reporter`` says it is due."""
    if not reporter.due(progress, wall):
        return []
    value, key = encode(progress), f"progress:{progress.partition}".encode()
    return [Outbound(topic, key, value, HEADERS, s) for s in range(partitions)]
