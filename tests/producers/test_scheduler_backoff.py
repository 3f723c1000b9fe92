"""The scheduler collector's backoff without a scheduler: doubling per failure in a row, capped,
back to the interval once it answers (tests/producers/test_slurm.py does it against a real Slurm)."""

from __future__ import annotations

import asyncio
from typing import Any

from gpuwarden.contract import SchedulerPoll
from gpuwarden.producers.scheduler import Collector


class _Flaky:
    """Fails ``failures`` polls, then answers with no jobs."""

    def __init__(self, failures: int) -> None:
        self.left = failures

    async def poll(self, cluster: str, ts: float) -> tuple[list[Any], list[Any]]:
        if self.left:
            self.left -= 1
            raise ConnectionError("connection refused")
        return [], []


def test_the_wait_doubles_per_failure_in_a_row_up_to_the_cap() -> None:
    c = Collector(_Flaky(0), "c1", "slurm", lambda records: None, interval_s=30, max_backoff_s=300)
    assert [c.delay(n) for n in range(7)] == [30, 60, 120, 240, 300, 300, 300]


async def test_the_loop_waits_by_its_failures_in_a_row_and_starts_again_after_an_answer() -> None:
    records: list[Any] = []
    waits: list[float] = []

    class Recorded(Collector):
        def delay(self, failures_in_a_row: int) -> float:
            waits.append(super().delay(failures_in_a_row))
            return 0.0  # no wall time spent in the test

    c = Recorded(_Flaky(4), "c1", "slurm", records.extend, interval_s=1, max_backoff_s=8)
    await c.run(asyncio.Event(), polls=6)
    assert waits == [2, 4, 8, 8, 1]  # after each poll but the last
    assert [bool(r.error) for r in records if isinstance(r, SchedulerPoll)] == [True] * 4 + [False] * 2
