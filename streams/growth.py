"""Growth toward a capacity (a memory leak toward OOM), judged over a wait that scales with the danger.

A fixed window and ``for`` make a fast leak wait as long as a slow creep. Here a growth is
judged over a ladder of windows, shortest first: over each, the Theil-Sen slope of 30-second
minima projects the time until the series reaches its capacity, and the growth fires once it
has been seen for ``hold_share`` of that time (at least ``hold_min``, at most ``hold_max``).
A leak that fills the card in 3 h is seen for ~4 min; one that needs days, for up to 2 h.

Why minima: a checkpoint that briefly allocates raises a bucket, not the
minimum of its span, and Theil-Sen (the median of pairwise slopes) ignores what still gets
through. A caching allocator's warm-up grows fast and then levels off: its later part's slope
falls short of ``sustained`` times the window's, and it is over within ``hold_min``; a step
(memory staged for a checkpoint no SDK reported) leaves the earlier part's slope short of it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

from gpuwarden.streams import trend as tr
from gpuwarden.streams.statecodec import state

#: One point per this much event time (or per bucket, if longer): the minimum of its bucket means.
STEP_S = 30.0
#: A window judges growth from this many points: fewer cannot tell a ramp from one staged step
#: that bucket means smear over two points.
MIN_POINTS = 6
#: Theil-Sen over at most this many points (evenly thinned): 276 pairwise slopes.
MAX_POINTS = 24
#: Each rung of the ladder of windows is this much longer than the one before.
LADDER = 1.25


@state
class Minima:
    """Per-``STEP_S`` minima of a series' bucket means over the last ``span`` seconds; a point's time
    is the middle of the bucket the minimum came from."""

    __slots__ = ("span", "t", "v")

    def __init__(self, span: float) -> None:
        self.span = span
        self.t: list[float] = []
        self.v: list[float] = []

    def add(self, t_end: float, value: float | None, bucket_s: float) -> None:
        """A bucket ending at ``t_end`` closed with mean ``value``."""
        if value is None:
            return
        mid = t_end - bucket_s / 2
        if self.t and self.t[-1] // STEP_S == mid // STEP_S:
            if value < self.v[-1]:
                self.t[-1], self.v[-1] = mid, value
            return
        self.t.append(mid)
        self.v.append(value)
        cut = bisect_right(self.t, t_end - self.span - STEP_S)
        if cut:
            del self.t[:cut], self.v[:cut]


def theil_sen(ts: list[float], ys: list[float]) -> float | None:
    """Median of the pairwise slopes (per second), over at most ``MAX_POINTS`` points."""
    n = len(ts)
    if n > MAX_POINTS:
        idx = [round(i * (n - 1) / (MAX_POINTS - 1)) for i in range(MAX_POINTS)]
        ts, ys = [ts[i] for i in idx], [ys[i] for i in idx]
    points = list(zip(ts, ys))  # pairs walked by slices, not indexed: ~15 % less time per call
    slopes = [(yj - yi) / (tj - ti) for i, (ti, yi) in enumerate(points) for tj, yj in points[i + 1:] if tj > ti]
    if not slopes:
        return None
    slopes.sort()
    m = len(slopes)
    return slopes[m // 2] if m % 2 else (slopes[m // 2 - 1] + slopes[m // 2]) / 2


def ladder(hold_min: float, hold_max: float) -> list[float]:
    """Window lengths from ``hold_min`` to ``hold_max``, each ~``LADDER`` times the last, in whole steps."""
    out, d = [], float(hold_min)
    while d < hold_max:
        w = max(hold_min, STEP_S * round(d / STEP_S))
        if not out or w > out[-1]:
            out.append(w)
        d *= LADDER
    return [*out, hold_max] if not out or out[-1] < hold_max else out


@dataclass(frozen=True)
class Growth:
    """What a growth judgement measured over one window (``window_s``)."""

    window_s: float
    start: float
    last: float
    slope: float  # per second
    time_to_full_s: float | None
    monotonic: float | None
    holds: bool


def judge(m: Minima, now: float, capacity: float, *, rungs: tuple[float, ...], rate: float, rise: float,
          monotonic: float, sustained: float, share: float, hold_min: float, hold_max: float,
          measure: bool) -> Growth | None:
    """The first window of ``rungs`` (the ladder) over which the growth holds; with ``measure``,
    when none does, what the shortest covered window measured (``holds`` False). ``rate`` per second."""
    ts, ys = m.t, m.v
    n = len(ts)
    if n < MIN_POINTS:
        return None
    shortest: Growth | None = None
    for d in rungs:
        since = now - d
        if ts[0] > since + STEP_S:
            break  # no history this far back (nor further)
        i = bisect_right(ts, since)
        if n - i < MIN_POINTS:
            continue
        if not measure:  # far too flat for this window (most GPUs, most of the time): no pairwise slopes
            up = ys[-1] - ys[i]
            if up <= 0.5 * rise or up <= 0.5 * rate * (ts[-1] - ts[i]):
                continue
        wt, wy = ts[i:], ys[i:]
        mono = tr.monotonicity(wy)
        if not measure and (mono is None or mono < monotonic):
            continue  # not rising steadily over this window: judged without the pairwise slopes
        s = theil_sen(wt, wy)
        if s is None:
            continue
        ttf = tr.time_to_full(wy[-1], capacity, s)
        g = Growth(d, wy[0], wy[-1], s, ttf, mono, False)
        if measure and shortest is None:
            shortest = g
        if s <= rate or s * (wt[-1] - wt[0]) <= rise or ttf is None or d < min(max(share * ttf, hold_min), hold_max):
            continue
        if g.monotonic is None or g.monotonic < monotonic:
            continue
        k = len(wt) // 3
        early, late = theil_sen(wt[:k], wy[:k]), theil_sen(wt[-k:], wy[-k:])
        if late is None or late < sustained * s:
            continue  # levelling off: a warm-up reaching its plateau
        if early is None or early < sustained * s:
            continue  # a step at the window's end (staging memory), not growth seen over it
        if measure:
            return _since_ramp(Growth(d, wy[0], wy[-1], s, ttf, g.monotonic, True), wt, wy, capacity)
        return Growth(d, wy[0], wy[-1], s, ttf, g.monotonic, True)
    return shortest


def _since_ramp(g: Growth, ts: list[float], ys: list[float], capacity: float) -> Growth:
    """``g`` measured from where its sustained growth began: after the last point further below
    the fitted line than a quarter of the window's growth (a job's start-up ramp, 0.6 -> 63.8 GiB
    in its first minute, would otherwise be the "from" of a growth of a few GiB); the figures
    (start, slope, window) then all come from that shorter window."""
    s = g.slope
    base = sorted(y - s * t for t, y in zip(ts, ys))[len(ts) // 2]
    tol = 0.25 * s * (ts[-1] - ts[0])
    j = 0
    for i, (t, y) in enumerate(zip(ts, ys)):
        if y - (base + s * t) < -tol:
            j = i + 1
    if j == 0 or len(ts) - j < MIN_POINTS:
        return g
    wt, wy = ts[j:], ys[j:]
    s2 = theil_sen(wt, wy)
    if s2 is None or s2 <= 0:
        return g
    return Growth(round(g.window_s - (wt[0] - ts[0])), wy[0], wy[-1], s2, tr.time_to_full(wy[-1], capacity, s2),
                  tr.monotonicity(wy), True)
