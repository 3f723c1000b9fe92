"""One inference service's event-time windows: what its scrapes said, per minute and per hour.

The inference records are per-interval deltas (``inference_metrics/1``), so a window is a
sum of the intervals that end in it: a record belongs to the minute holding its ``ts``.
Minutes keep the histograms' bucket deltas, the counters and the gauges' means for
:data:`MINUTES_KEPT_S` (the longest short-horizon read: the 6 h slow-burn window); hours
keep only each objective's good/total events, for the long burn windows (3 d) and the SLO
window's budget (30 d). A window is whole minutes (or whole hours) ending at the instant it
is read, which is always a minute boundary: rules run when a minute closes. Objective events
are also summed per 5-minute block, so a 6 h window reads ~80 rows, not 360, and the closed
hours of a long window are summed once per hour (``memo``): a service's rules cost the same
whatever history it has.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import add

from gpuwarden.streams.quantiles import Buckets
from gpuwarden.slo import Events
from gpuwarden.streams.statecodec import state

MINUTE_S = 60.0
BLOCK_S = 300.0
HOUR_S = 3600.0
MINUTES_KEPT_S = 7 * HOUR_S
#: Histograms, counters and gauges are read over at most 70 min (the tail rule's hour before its
#: 10 minutes): older minutes keep only their objectives' events.
DETAIL_KEPT_S = 75 * MINUTE_S


@state
class Minute:
    """One minute of one service: per histogram name ``[counts..., sum]`` (counts has one more
    entry than the name's bounds), per counter its delta, per gauge ``[sum, n]`` of the
    records' values, per objective ``[good, total, undecided]``."""

    __slots__ = ("hist", "counters", "gauges", "events")

    def __init__(self) -> None:
        self.hist: dict[str, list[float]] = {}
        self.counters: dict[str, float] = {}
        self.gauges: dict[str, list[float]] = {}
        self.events: dict[str, list[int]] = {}


@state
class ServiceWindow:
    """Minutes and hours of one service on one node, and the bucket bounds per histogram."""

    __slots__ = ("minutes", "blocks", "hours", "bounds", "first_ts", "memo", "detail_from")

    def __init__(self) -> None:
        self.minutes: dict[float, Minute] = {}
        self.blocks: dict[float, dict[str, list[int]]] = {}
        self.hours: dict[float, dict[str, list[int]]] = {}
        #: (first hour, current hour, objective) -> events of the closed hours from the first on
        self.memo: dict[tuple[float, float, str], list[int]] = {}
        self.detail_from: float | None = None  # minutes before this hold only their events
        self.bounds: dict[str, tuple[float, ...]] = {}
        self.first_ts: float | None = None

    def minute(self, ts: float) -> Minute:
        start = ts - ts % MINUTE_S
        m = self.minutes.get(start)
        if m is None:
            m = self.minutes[start] = Minute()
        return m

    def add_histogram(self, ts: float, name: str, bounds: tuple[float, ...], counts: list[int], total: float) -> None:
        """Add one series' bucket deltas. Other bounds than before (the server was reconfigured)
        cannot be added bucket by bucket: the name's older minutes are forgotten."""
        if self.bounds.get(name) != bounds:
            if name in self.bounds:
                for m in self.minutes.values():
                    m.hist.pop(name, None)
            self.bounds[name] = bounds
        row = self.minute(ts).hist.get(name)
        if row is None:
            self.minute(ts).hist[name] = [*map(float, counts), total]
        else:
            for i, c in enumerate(counts):
                row[i] += c
            row[-1] += total

    def add_counter(self, ts: float, name: str, delta: float) -> None:
        c = self.minute(ts).counters
        c[name] = c.get(name, 0.0) + delta

    def add_gauge(self, ts: float, name: str, value: float) -> None:
        g = self.minute(ts).gauges.setdefault(name, [0.0, 0.0])
        g[0] += value
        g[1] += 1

    def add_events(self, ts: float, key: str, ev: Events) -> None:
        for row in (self.minute(ts).events.setdefault(key, [0, 0, 0]),
                    self.blocks.setdefault(ts - ts % BLOCK_S, {}).setdefault(key, [0, 0, 0]),
                    self.hours.setdefault(ts - ts % HOUR_S, {}).setdefault(key, [0, 0, 0])):
            row[0] += ev.good
            row[1] += ev.total
            row[2] += ev.undecided

    def trim(self, now: float, hours_kept_s: float) -> None:
        """Forget what no window reads any more (oldest first: the tables fill in time order)."""
        old = now - DETAIL_KEPT_S
        since = self.detail_from if self.detail_from is not None else min(self.minutes, default=old)
        for m in _starts(self.minutes, max(since, now - MINUTES_KEPT_S), old, MINUTE_S):
            m.hist.clear()
            m.counters.clear()
            m.gauges.clear()
        self.detail_from = max(old, since)
        for table, floor in ((self.minutes, now - MINUTES_KEPT_S), (self.blocks, now - MINUTES_KEPT_S - BLOCK_S),
                             (self.hours, now - hours_kept_s - HOUR_S)):
            while table and (oldest := next(iter(table))) < floor:
                del table[oldest]

    # ------------------------------------------------------------------ reads

    def _minutes(self, since: float, until: float) -> Iterable[Minute]:
        """The minutes starting in ``[since, until)`` (looked up by start: reads are short spans
        of a long history)."""
        return _starts(self.minutes, since, until, MINUTE_S)

    def buckets(self, name: str, since: float, until: float) -> tuple[Buckets | None, float]:
        """The histogram's buckets over the minutes in ``[since, until)`` and its sum (None
        without any observation)."""
        bounds = self.bounds.get(name)
        if bounds is None:
            return None, 0.0
        counts, total = [0.0] * (len(bounds) + 1), 0.0
        for m in self._minutes(since, until):
            row = m.hist.get(name)
            if row is not None:
                counts = list(map(add, counts, row))  # bucket by bucket (the row's last value is its sum)
                total += row[-1]
        b = Buckets(bounds, tuple(round(c) for c in counts))
        return (b if b.total else None), total

    def counter(self, name: str, since: float, until: float) -> float:
        return sum(m.counters.get(name, 0.0) for m in self._minutes(since, until))

    def gauge_mean(self, name: str, since: float, until: float) -> float | None:
        """The mean of the gauge's values scraped in ``[since, until)``; None when none were."""
        s = n = 0.0
        for m in self._minutes(since, until):
            g = m.gauges.get(name)
            if g is not None:
                s, n = s + g[0], n + g[1]
        return s / n if n else None

    def events(self, key: str, since: float, until: float) -> Events:
        """An objective's events in ``[since, until)``: exact within the kept minutes (minutes
        at the edges, 5-minute blocks between), whole hours (those overlapping the span) beyond."""
        if since >= until - MINUTES_KEPT_S:
            lo = min(since - since % BLOCK_S + (BLOCK_S if since % BLOCK_S else 0.0), until)
            hi = max(until - until % BLOCK_S, lo)
            rows: list[list[int]] = [m.events[key] for m in self._minutes(since, lo) if key in m.events]
            rows += [b[key] for b in _starts(self.blocks, lo, hi, BLOCK_S) if key in b]
            rows += [m.events[key] for m in self._minutes(hi, until) if key in m.events]
        else:
            first, current = since - since % HOUR_S, until - until % HOUR_S
            closed = self.memo.get((first, current, key))
            if closed is None:
                for k in [k for k in self.memo if k[1] != current]:
                    del self.memo[k]
                closed = self.memo[first, current, key] = _add(h[key] for h in _starts(self.hours, first, current, HOUR_S)
                                                               if key in h)
            rows = [closed] + [h[key] for h in _starts(self.hours, current, until, HOUR_S) if key in h]
        g, t, u = _add(rows)
        return Events(g, t, u)

def _starts(table: dict, since: float, until: float, step: float) -> Iterable:
    """The values of ``table`` (keyed by multiples of ``step``) for keys in ``[since, until)``."""
    first = since - since % step
    first += step if first < since else 0.0
    get = table.get
    return (v for k in range(max(int((until - first + step - 1e-9) // step), 0))
            if (v := get(first + k * step)) is not None)


def _add(rows: Iterable[list[int]]) -> list[int]:
    g = t = u = 0
    for row in rows:
        g, t, u = g + row[0], t + row[1], u + row[2]
    return [g, t, u]
