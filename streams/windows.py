"""Rolling event-time windows: fixed-width buckets of per-metric aggregates, and event logs.

Why buckets: a 30-minute trend at 1 s ticks is 1,800 points per metric per GPU;
bucket means (15 s by default) keep 120 points, average the sample noise out
and make the per-sample cost a handful of additions. State stays bounded by
``maxlen`` buckets whatever the tick rate.
"""

from __future__ import annotations

from collections import deque
from itertools import takewhile
from collections.abc import Sequence

from streams.statecodec import state

@state
class BucketWindow:
    """Rows of the open bucket plus a deque of closed buckets (``[t_end, means, maxes]``).

    The open bucket keeps raw rows and aggregates them column-wise at close, so the
    per-sample cost is one list append; closed rows are indexed like the metric row
    (``None`` where no sample had the metric) with derived values appended to the means.
    """

    __slots__ = ("rows", "hist")

    def __init__(self, maxlen: int) -> None:
        self.rows: list = []
        self.hist: deque = deque(maxlen=maxlen)

    def add(self, row: Sequence[float | None]) -> None:
        self.rows.append(row)

    def close(self, t_end: float, derive=None) -> list | None:
        """Close the open bucket at ``t_end``; ``derive(means)`` returns values to append."""
        if not self.rows:
            return None
        means: list[float | None] = []
        maxes: list[float | None] = []
        for col in zip(*self.rows):
            vals = [v for v in col if v is not None]
            if vals:
                means.append(sum(vals) / len(vals))
                maxes.append(max(vals))
            else:
                means.append(None)
                maxes.append(None)
        if derive is not None:
            means.extend(derive(means))
        bucket = [t_end, means, maxes]
        self.hist.append(bucket)
        self.rows = []
        return bucket

    def series(self, index: int, since: float, use_max: bool = False) -> tuple[list[float], list[float]]:
        """(times, values) of one metric over closed buckets with ``t_end > since``."""
        col = 2 if use_max else 1
        pairs = [(b[0], b[col][index]) for b in takewhile(lambda b: b[0] > since, reversed(self.hist))]
        pairs.reverse()
        return [t for t, v in pairs if v is not None], [v for t, v in pairs if v is not None]

    def latest(self, index: int) -> float | None:
        """The metric's mean in the newest closed bucket."""
        return self.hist[-1][1][index] if self.hist else None


@state
class EventLog:
    """Recent discrete events by kind for count-within conditions (bounded, event time).

    Kept per kind so counting XIDs never walks a storm of clock or corrected-ECC events.
    """

    __slots__ = ("by_kind", "horizon_s", "maxlen")

    def __init__(self, horizon_s: float, maxlen: int = 1024) -> None:
        self.by_kind: dict = {}
        self.horizon_s = horizon_s
        self.maxlen = maxlen

    def add(self, ts: float, fields: dict) -> None:
        q = self.by_kind.get(fields["kind"])
        if q is None:
            q = self.by_kind[fields["kind"]] = deque(maxlen=self.maxlen)
        q.append([ts, fields])

    def expire(self, now: float) -> None:
        for kind in list(self.by_kind):
            q = self.by_kind[kind]
            while q and q[0][0] < now - self.horizon_s:
                q.popleft()
            if not q:
                del self.by_kind[kind]

    def count(self, since: float, until: float, pred, kinds: frozenset | None = None) -> int:
        """Events (weighted by their ``n``) with ``since < ts <= until`` that satisfy ``pred``."""
        n = 0
        for kind, q in self.by_kind.items():
            if kinds is not None and kind not in kinds:
                continue
            for ts, fields in reversed(q):
                if ts <= since:
                    break
                if ts <= until and pred(fields):
                    n += fields["n"]
        return n
