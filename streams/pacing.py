"""A task's inputs read at one pace of event time while they catch up (flow control).

A stage holds a node's records until every input that still has records to read has passed
their time (streams/backlog.py): what it reads of one input ahead of the others waits in memory.
``getmany`` returns whatever partitions answered first, so in a 2 h backlog the samples ran
minutes of event time ahead of the task metrics and the stage held most of the backlog (a
worker's peak RSS 420-480 MiB against 74 MiB for the engine alone; the held ``Snap`` objects
were the largest live allocation). Kafka Streams bounds the same thing by pausing a partition
whose buffer is full (``buffered.records.per.partition``); here a partition is paused while the
last record read from it is more than ``AHEAD_S`` of event time past the slowest input that
still has records to read, and resumed once that input catches up or nothing is left to read.

The order records are read in changes, never what the stages make of them: they are built to
give the same output in any arrival order. A laggard that stops giving records (its end held
back by a transaction still open) does not hold the others for long: after ``STALL_S`` without
progress every partition is resumed. That clock is the time the worker spent waiting for records,
not wall time: on a loaded CPU a round of records took 12-22 s, every such round counted as a
stall, the inputs ran ahead and the stage held them (a worker's peak RSS 400 MiB, not 160;
docs/benchmarks.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: How far in event time (Kafka timestamps, seconds) an input may run ahead of the slowest
#: input still being read before it waits: a few minutes of a stage's buffer, not the backlog.
AHEAD_S = 120.0
#: Seconds spent waiting for records (``getmany``, not processing them) a laggard may go without
#: a record before every paused input is resumed.
STALL_S = 10.0


@dataclass
class Pacing:
    """One task's inputs: the Kafka timestamp of the last record read from each (seconds) and
    those paused to let the others catch up."""

    last: dict[Any, float] = field(default_factory=dict)
    paused: set[Any] = field(default_factory=set)
    floor: float | None = None  # the slowest lagging input's last timestamp at the last plan
    moved_at: float = 0.0  # the clock (seconds waited for records) when the floor last moved

    def read(self, records: Mapping[Any, list]) -> None:
        """Note the last timestamp of each partition's records of one ``getmany``."""
        for tp, recs in records.items():
            if recs:
                self.last[tp] = recs[-1].timestamp / 1000.0

    def plan(self, lagging: Iterable[Any], waited: float) -> tuple[set, set]:
        """(to pause, to resume) given the partitions that still have records to read and the
        seconds spent waiting for records so far."""
        lagging = set(lagging)
        if len(lagging) < 2:
            return set(), self._release()
        floor = min(self.last.get(tp, -math.inf) for tp in lagging)
        if floor != self.floor:
            self.floor, self.moved_at = floor, waited
        elif waited - self.moved_at >= STALL_S:  # no pacing until the laggard moves again
            return set(), self._release()
        ahead = {tp for tp in lagging if self.last.get(tp, -math.inf) > floor + AHEAD_S}
        pause, resume = ahead - self.paused, self.paused - ahead
        self.paused = ahead
        return pause, resume

    def _release(self) -> set:
        out, self.paused = self.paused, set()
        return out
