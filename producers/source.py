"""What the agent samples from: the NVML collector and the simulator both satisfy :class:`Source`.

A source is stepped, never threaded: ``step()`` returns the records of one tick
stamped with their event time. :func:`paced` turns any source into a live
stream at its cadence (the agent and ``gpuwarden run`` share it); a simulated run with ``--duration`` simply loops over
``step()`` as fast as it can.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
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


async def paced(step: Callable[[], list[Record]], period: float, stop: asyncio.Event, *,
                duration: float | None = None,
                clock: Callable[[], float] = time.monotonic) -> AsyncIterator[list[Record]]:
    """Call ``step`` once per ``period`` of wall time until ``stop`` is set or ``duration`` passes.

    Ticks are scheduled on a fixed grid, so a slow tick shortens the next wait
    instead of drifting; a tick that overruns a whole period skips ahead. The
    waits are asyncio waits, so delivery and publishing tasks run between ticks.
    """
    due = clock()
    end = None if duration is None else due + duration
    while not stop.is_set() and (end is None or clock() < end):
        yield step()
        due += period
        now = clock()
        if due < now:
            due = now
        try:
            await asyncio.wait_for(stop.wait(), due - now)
        except asyncio.TimeoutError:
            pass
