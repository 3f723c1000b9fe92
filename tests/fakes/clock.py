"""Simulated time: sleeping tasks wake in order of their deadlines, and time jumps instead of passing.

The earliest sleeper moves the clock to its own deadline; later sleepers wait
for the clock to reach theirs. So concurrent sleeps overlap as they would in
real time (two tasks sleeping 60 s take 60 simulated seconds, not 120), and
minutes run in milliseconds.
"""

from __future__ import annotations

import asyncio

SETTLE_ROUNDS = 3


class SimClock:
    def __init__(self, t: float = 1_767_225_600.0) -> None:  # 2026-01-01 UTC
        self.t = t
        self._deadlines: list[float] = []

    def __call__(self) -> float:
        return self.t

    async def sleep(self, s: float) -> None:
        deadline = self.t + max(0.0, s)
        self._deadlines.append(deadline)
        settle = 0
        try:
            while self.t < deadline:
                # Earliest deadline for a few rounds in a row (so tasks about to sleep register first).
                settle = settle + 1 if deadline <= min(self._deadlines) else 0
                if settle > SETTLE_ROUNDS:
                    self.t = deadline
                else:
                    await asyncio.sleep(0.001)
        finally:
            self._deadlines.remove(deadline)
        await asyncio.sleep(0)
