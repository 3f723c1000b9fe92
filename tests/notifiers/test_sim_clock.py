"""The simulated clock the delivery tests run on: time jumps only while no real work is in flight."""

from __future__ import annotations

import asyncio
import time

from tests.fakes.clock import SimClock


async def test_time_does_not_jump_while_a_task_waits_on_real_io() -> None:
    clock = SimClock(100.0)
    seen: list[float] = []

    async def request() -> None:  # a round trip to a server thread: real time, no simulated time
        await asyncio.to_thread(time.sleep, 0.05)
        seen.append(clock())

    sleeper = asyncio.create_task(clock.sleep(0.5))
    await request()
    await sleeper
    assert seen == [100.0] and clock() == 100.5


async def test_waiting_on_tasks_and_locks_does_not_stall_the_clock() -> None:
    clock, lock = SimClock(0.0), asyncio.Lock()

    async def holder() -> None:
        async with lock:
            await clock.sleep(60)

    async def waiter() -> float:
        await asyncio.sleep(0)  # let the holder take the lock first
        async with lock:
            return clock()

    async with asyncio.timeout(10):
        got = await asyncio.gather(holder(), waiter(), clock.sleep(30))
    assert got[1] == 60.0 and clock() == 60.0


async def test_concurrent_sleeps_overlap() -> None:
    clock = SimClock(0.0)
    woke: list[tuple[str, float]] = []

    async def nap(name: str, s: float) -> None:
        await clock.sleep(s)
        woke.append((name, clock()))

    await asyncio.gather(nap("b", 60), nap("a", 20), nap("c", 60))
    assert sorted(woke) == [("a", 20.0), ("b", 60.0), ("c", 60.0)] and clock() == 60.0
