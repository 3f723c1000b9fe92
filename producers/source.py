"""What the agent samples from: the NVML collector and the simulator both satisfy :class:`Source`.

A source is stepped, never threaded: ``step()`` returns the records of one tick
stamped with their event time. :func:`paced` turns any source into a live
stream at its cadence; a simulated run with ``--duration`` simply loops over
``step()`` as fast as it can.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

from gpuwarden.contract import GpuEvent, NodeSnapshot, TaskMetric

Record = NodeSnapshot | GpuEvent | TaskMetric


@runtime_checkable
class Source(Protocol):
    tick_s: float
    """Seconds between two ticks (the fast cadence)."""

    def step(self) -> list[Record]:
        """One tick: snapshots, events and task metrics, sorted by ``ts``."""
        ...


def paced(source: Source, *, stop: Callable[[], bool] = lambda: False,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> Iterator[list[Record]]:
    """Step ``source`` once per ``tick_s`` of wall time until ``stop()``.

    Ticks are scheduled on a fixed grid, so a slow tick shortens the next wait
    instead of drifting; a tick that overruns a whole period skips ahead.
    """
    period = source.tick_s
    due = clock()
    while not stop():
        yield source.step()
        due += period
        now = clock()
        if due < now:
            due = now
        sleep(due - now)
