"""Per-receiver send limits on the injected clock.

Each limit is a bucket of ``count`` tokens where a spent token comes back
``window`` seconds after it was spent. Unlike a bucket refilled at a steady
rate, this never lets more than ``count`` sends into any ``window``-long span,
which is how DingTalk's "20 per minute" is counted on the other side.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class WindowBucket:
    def __init__(self, count: int, window_s: float) -> None:
        if count < 1 or window_s <= 0:
            raise ValueError("a limit needs count >= 1 and window > 0")
        self.count, self.window_s = count, window_s
        self._spent: deque[float] = deque()

    def _expire(self, now: float) -> None:
        while self._spent and self._spent[0] <= now - self.window_s:
            self._spent.popleft()

    def wait_s(self, now: float) -> float:
        """Seconds until a token is free (0 when one is free now)."""
        self._expire(now)
        if len(self._spent) < self.count:
            return 0.0
        return self._spent[0] + self.window_s - now

    def take(self, now: float) -> None:
        self._spent.append(now)


class Limiter:
    """All of a receiver's limits together (Feishu has two: 5/s and 100/min)."""

    def __init__(self, limits: list[tuple[int, float]], clock: Callable[[], float]) -> None:
        self.buckets = [WindowBucket(c, w) for c, w in limits]
        self.clock = clock

    def wait_s(self) -> float:
        now = self.clock()
        return max((b.wait_s(now) for b in self.buckets), default=0.0)

    def try_take(self) -> bool:
        """Spend a token from every bucket if all have one."""
        if self.wait_s() > 0:
            return False
        now = self.clock()
        for b in self.buckets:
            b.take(now)
        return True
