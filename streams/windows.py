"""Rolling event-time windows: fixed-width buckets of per-metric aggregates, and event logs.

Why buckets: a 30-minute trend at 1 s ticks is 1,800 points per metric per GPU;
bucket means (15 s by default) keep 120 points, average the sample noise out
and make the per-sample cost a handful of additions. State stays bounded by
``maxlen`` buckets whatever the tick rate.

Closed buckets are kept column-wise (one list per metric) so a rule's series is
two list slices found by bisection; in a dump each column keeps only the
buckets the rules can still read (``keep``), as packed float64 (NaN = absent).
"""

from __future__ import annotations

import base64
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Sequence
from math import isnan
from typing import NamedTuple

from gpuwarden.streams.statecodec import state

_NAN = float("nan")
_ALL = (1,) * 256  # no ``keep``: every column's maximum is kept
#: With ``keep`` (what the rules read: a dump writes no more), up to this many buckets past
#: ``maxlen`` are held and then dropped at once: a drop per close walked every column (~2.5 %
#: of a stream worker's CPU on a catch-up) for buckets no rule reads. Without ``keep`` a dump
#: writes every bucket held, so exactly ``maxlen`` are.
TRIM_SLACK = 32


def pack_floats(values: Sequence[float | None]) -> str:
    """Exact, compact column encoding: float64 little-endian, NaN for None, base64."""
    a = array("d", [_NAN if v is None else v for v in values])
    if a.itemsize != 8:  # pragma: no cover - every CPython platform has 8-byte doubles
        raise RuntimeError("float64 arrays required")
    return base64.b64encode(a.tobytes()).decode()


def unpack_floats(text: str) -> list[float | None]:
    a = array("d")
    a.frombytes(base64.b64decode(text))
    return [None if isnan(v) else v for v in a]


class Keep(NamedTuple):
    """Buckets a dump keeps per mean column and per max column (a max column with 0 is never
    read, so not computed)."""

    means: tuple[int, ...]
    maxes: tuple[int, ...]


class ClosedBucket(NamedTuple):
    """A bucket as ``BucketWindow.close`` closed it: means per column (derived ones appended),
    maxima per raw column (None where nothing reads it)."""

    end: float
    means: list[float | None]
    maxes: list[float | None]


@state
class BucketWindow:
    """Rows of the open bucket plus closed buckets as columns (``t`` ends, ``mean``, ``max``).

    The open bucket keeps raw rows and aggregates them column-wise at close, so the
    per-sample cost is one tuple append; ``mean`` columns are indexed like the metric
    row (``None`` where no sample had the metric) with derived values appended, ``max``
    columns cover the raw row only. Lists keep the newest ``maxlen`` buckets.
    """

    __slots__ = ("rows", "t", "mean", "max", "maxlen", "keep", "_packed")

    def __init__(self, maxlen: int, keep: Keep | None = None) -> None:
        self.rows: list = []
        self.t: list[float] = []
        self.mean: list[list] = []
        self.max: list[list] = []
        self.maxlen = maxlen
        # None: everything.
        self.keep = keep
        self._packed: tuple | None = None  # (key, packed closed buckets) until the next close

    def add(self, row: Sequence[float | None]) -> None:
        self.rows.append(row)

    def close(self, t_end: float, derive: Callable[[list], list] | None = None) -> ClosedBucket | None:
        """Close the open bucket at ``t_end``; ``derive(means)`` returns values to append."""
        rows = self.rows
        if not rows:
            return None
        n = len(rows)
        cols = list(zip(*rows))
        wanted = self.keep.maxes if self.keep is not None else _ALL
        try:
            # A column rarely lacks a value, and sum() raises on a None: far cheaper than
            # testing every value for None (a comparison per value) before summing.
            means: list[float | None] = [s / n for s in map(sum, cols)]
            maxes: list[float | None] = [max(c) if want else None for c, want in zip(cols, wanted)]
        except TypeError:
            means, maxes = _sparse(cols, wanted)
        if derive is not None:
            means.extend(derive(means))
        if not self.mean:
            self.mean = [[None] * len(self.t) for _ in means]
            self.max = [[None] * len(self.t) for _ in maxes]
        self.t.append(t_end)
        for c, v in zip(self.mean, means):
            c.append(v)
        for c, v in zip(self.max, maxes):
            c.append(v)
        over = len(self.t) - self.maxlen
        if over > (0 if self.keep is None else TRIM_SLACK):
            del self.t[:over]
            for c in self.mean:
                del c[:over]
            for c in self.max:
                del c[:over]
        self.rows = []
        return ClosedBucket(t_end, means, maxes)

    def series(self, index: int, since: float, use_max: bool = False) -> tuple[list[float], list[float]]:
        """(times, values) of one metric over closed buckets with ``t_end > since``."""
        t = self.t
        if not t:
            return [], []
        i = bisect_right(t, since)
        vs = (self.max if use_max else self.mean)[index][i:]
        ts = t[i:]
        if None not in vs:
            return ts, vs
        return [a for a, v in zip(ts, vs) if v is not None], [v for v in vs if v is not None]

    def latest(self, index: int, use_max: bool = False) -> float | None:
        """The metric's mean (or max) in the newest closed bucket."""
        cols = self.max if use_max else self.mean
        return cols[index][-1] if self.t else None

    def last_end(self) -> float | None:
        return self.t[-1] if self.t else None

    def latest_row(self) -> list | None:
        """Every mean of the newest closed bucket (the live view's one row per GPU)."""
        return [c[-1] for c in self.mean] if self.t else None

    # Compact state: only the buckets the rules can read, columns as packed floats, the open
    # bucket's rows as one packed column. Closed buckets change once a bucket (15 s), and a
    # checkpoint comes every few seconds: they are packed once per close.
    def __getstate__(self) -> dict:
        n = len(self.t)
        key = (n, self.t[-1] if n else None, self.keep)
        if self._packed is None or self._packed[0] != key:
            keep = self.keep or Keep((n,) * len(self.mean), (n,) * len(self.max))
            depth = min(n, max((*keep.means, *keep.maxes, 0)))
            self._packed = (key, pack_floats(self.t[n - depth:]),
                            [pack_floats(c[n - min(k, depth):]) for c, k in zip(self.mean, keep.means)],
                            [pack_floats(c[n - min(k, depth):]) for c, k in zip(self.max, keep.maxes)])
        _, t, mean, maxes = self._packed
        rows = self.rows
        return {"rows": [len(rows[0]) if rows else 0, pack_floats([v for r in rows for v in r])],
                "maxlen": self.maxlen, "keep": self.keep, "t": t, "mean": mean, "max": maxes}

    def __setstate__(self, s: dict) -> None:
        width, values = s["rows"][0], unpack_floats(s["rows"][1])
        rows = [tuple(values[i:i + width]) for i in range(0, len(values), width)] if width else []
        self.rows, self.maxlen, self._packed = rows, s["maxlen"], None
        self.keep = None if s["keep"] is None else Keep(*map(tuple, s["keep"]))
        self.t = unpack_floats(s["t"])
        n = len(self.t)
        self.mean = [_pad(unpack_floats(c), n) for c in s["mean"]]
        self.max = [_pad(unpack_floats(c), n) for c in s["max"]]


def _sparse(cols: list[tuple], wanted: Sequence[int]) -> tuple[list, list]:
    """Means and maxima (where ``wanted``) of columns some of whose values are None."""
    means: list[float | None] = []
    maxes: list[float | None] = []
    for col, want in zip(cols, wanted):
        vals = [v for v in col if v is not None]
        means.append(sum(vals) / len(vals) if vals else None)
        maxes.append(max(vals) if vals and want else None)
    return means, maxes


def _pad(col: list, n: int) -> list:
    return [None] * (n - len(col)) + col


@state
class EventLog:
    """Recent discrete events by kind for count-within conditions (bounded, event time).

    Kept per kind so counting XIDs never walks a storm of clock or corrected-ECC events;
    ``horizons`` (kind → seconds, ``None`` key for any kind) lets each kind expire as soon
    as no rule can count it.
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

    def expire(self, now: float, horizons: dict | None = None) -> None:
        for kind in list(self.by_kind):
            q = self.by_kind[kind]
            h = self.horizon_s if horizons is None else horizons.get(kind, horizons.get(None, 0.0))
            while q and q[0][0] < now - h:
                q.popleft()
            if not q:
                del self.by_kind[kind]

    def empty(self) -> bool:
        return not self.by_kind

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
