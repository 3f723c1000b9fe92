"""Per-receiver send limits on the wall clock (injected only to simulate it).

Each limit is a bucket of ``count`` tokens where a spent token comes back
``window`` seconds after the platform answered that send. Unlike a bucket
refilled at a steady rate, this never lets more than ``count`` sends into any
``window``-long span, which is how DingTalk's "20 per minute" is counted on the
other side; counting from the answer (the platform saw the request somewhere
between the send and its answer) keeps network jitter from squeezing two sends
into one window as the platform sees them.
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

    def free(self, now: float) -> int:
        """Tokens free now."""
        self._expire(now)
        return self.count - len(self._spent)

    def pace_s(self, now: float) -> float:
        """0 while half the tokens or more are free (a burst goes out at once); past that, the free
        tokens are spread evenly until the oldest spent one comes back, so the bucket never runs
        dry and leaves a window-long silence."""
        free = self.free(now)
        if free * 2 >= self.count or free == 0:
            return 0.0
        last = self._spent[-1]
        return last + (self._spent[0] + self.window_s - last) / free - now

    def take(self, now: float) -> None:
        self._spent.append(now)

    def restamp(self, now: float) -> None:
        """Count the newest token as spent at ``now`` (when the platform answered)."""
        if self._spent:
            self._spent[-1] = max(self._spent[-1], now)


class Limiter:
    """All of a receiver's limits together (Feishu has two: 5/s and 100/min)."""

    def __init__(self, limits: list[tuple[int, float]], clock: Callable[[], float]) -> None:
        self.buckets = [WindowBucket(c, w) for c, w in limits]
        self.clock = clock

    def wait_s(self) -> float:
        now = self.clock()
        return max((b.wait_s(now) for b in self.buckets), default=0.0)

    def free(self) -> int:
        """Sends allowed right now by every limit (a large number when there is none)."""
        now = self.clock()
        return min((b.free(now) for b in self.buckets), default=1 << 30)

    def pace_s(self) -> float:
        """Seconds until every limit's even share has passed: sends spread over the window under load,
        rather than a burst that spends the window at once and then a window-long silence."""
        now = self.clock()
        return max((b.pace_s(now) for b in self.buckets), default=0.0)

    def try_take(self) -> bool:
        """Spend a token from every bucket if all have one."""
        if self.wait_s() > 0:
            return False
        now = self.clock()
        for b in self.buckets:
            b.take(now)
        return True

    def answered(self) -> None:
        """The send just taken got its answer: its window starts now."""
        now = self.clock()
        for b in self.buckets:
            b.restamp(now)
