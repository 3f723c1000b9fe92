"""Simulated time: sleeping tasks wake in order of their deadlines, and time jumps instead of passing.

The earliest sleeper moves the clock to its own deadline; later sleepers wait
for the clock to reach theirs. So concurrent sleeps overlap as they would in
real time (two tasks sleeping 60 s take 60 simulated seconds, not 120), and
minutes run in milliseconds.

Time only jumps while nothing is happening in real time: every other task of
the loop is asleep on this clock, finished, or waiting for another task (an
``await`` on a task or ``gather``, an ``asyncio.Lock``). A task that is
runnable or waits on anything else (a socket, a thread, a real timer) is doing
real work, and real work takes (close to) no simulated time, as a loopback
round trip takes milliseconds next to the minutes being simulated. Without
this, a request in flight would be stamped by a fake platform at a later
simulated time than the sender's rate limiter saw. (Bound simulated waits with
``asyncio.timeout``: ``asyncio.wait_for``'s own real timer counts as real work.)
"""

from __future__ import annotations

import asyncio

SETTLE_ROUNDS = 3
"""Quiet polls in a row before a jump, so tasks about to sleep register first."""
POLL_S = 0.001
STUCK_S = 30.0
"""Real seconds the earliest sleeper waits for busy tasks before the test fails, naming them."""


class SimClock:
    def __init__(self, t: float = 1_767_225_600.0) -> None:  # 2026-01-01 UTC
        self.t = t
        self._sleepers: dict[asyncio.Task, float] = {}
        """Task → deadline of its simulated sleep."""
        try:
            self._outside = set(asyncio.all_tasks())
        except RuntimeError:  # made outside a running loop (a fixture)
            self._outside = set()
        """Tasks that existed when the clock was made (a Kafka client...): :meth:`settle` does not wait for them."""

    def __call__(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        me = asyncio.current_task()
        assert me is not None, "SimClock.sleep runs in a task"
        loop = asyncio.get_running_loop()
        deadline = self.t + max(0.0, s)
        self._sleepers[me] = deadline
        settle, waiting_since = 0, loop.time()
        try:
            while self.t < deadline:
                if deadline > min(self._sleepers.values()):
                    settle, waiting_since = 0, loop.time()  # an earlier sleeper moves the clock first
                elif busy := self._busy_tasks():
                    settle = 0
                    if loop.time() - waiting_since > STUCK_S:
                        raise RuntimeError(f"SimClock: time cannot advance; busy in real time for over "
                                           f"{STUCK_S:g}s: {', '.join(map(_describe, busy))}")
                else:
                    settle += 1
                    if settle > SETTLE_ROUNDS:
                        self.t = deadline
                        break
                await asyncio.sleep(POLL_S)
        finally:
            del self._sleepers[me]
        await asyncio.sleep(0)

    async def settle(self) -> None:
        """Let every other task run until it sleeps on this clock, waits on a task or is done; time stays.

        A driver that moves ``t`` itself calls this after handing work to background
        tasks (delivery workers), so they act at the time they were given.
        """
        me, loop = asyncio.current_task(), asyncio.get_running_loop()
        quiet, since = 0, loop.time()
        while quiet <= SETTLE_ROUNDS:
            busy = [t for t in self._busy_tasks() if t is not me and t not in self._outside]
            quiet = 0 if busy else quiet + 1
            if busy and loop.time() - since > STUCK_S:
                raise RuntimeError(f"SimClock.settle: busy for over {STUCK_S:g}s: {', '.join(map(_describe, busy))}")
            await asyncio.sleep(POLL_S)

    def _busy_tasks(self) -> list[asyncio.Task]:
        """Tasks doing real work now (see the module docstring)."""
        return [t for t in asyncio.all_tasks() if not (t.done() or self._sleepers.get(t, -1.0) > self.t
                                                         or _waits_on_tasks(t))]


def _innermost(task: asyncio.Task) -> object:
    """The innermost coroutine of the task's await chain."""
    coro: object = task.get_coro()
    while (inner := getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)) is not None \
            and hasattr(inner, "cr_code"):
        coro = inner
    return coro


def _waits_on_tasks(task: asyncio.Task) -> bool:
    """Suspended on other tasks (judged themselves), not on the outside world.

    ``_fut_waiter`` (CPython's asyncio, C and Python alike) is the future a
    suspended task waits for; None means runnable.
    """
    waiter = getattr(task, "_fut_waiter", None)
    if waiter is None:
        return False
    if isinstance(waiter, (asyncio.Task, asyncio.tasks._GatheringFuture)):  # noqa: SLF001
        return True
    return getattr(_innermost(task), "cr_code", None) is asyncio.Lock.acquire.__code__


def _describe(task: asyncio.Task) -> str:
    inner = _innermost(task)
    return f"{task.get_name()} in {getattr(getattr(inner, 'cr_code', None), 'co_qualname', inner)}"
