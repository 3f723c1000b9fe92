"""Trend primitives: least-squares slope, monotonicity, time-to-full.

Pure functions over parallel lists (event-time seconds, values) so they work on
bucketed windows of any metric and are trivially testable.
"""

from __future__ import annotations

from collections.abc import Sequence


def slope(ts: Sequence[float], ys: Sequence[float]) -> float | None:
    """Ordinary least-squares slope of ``ys`` over ``ts`` (units of y per second).

    None with fewer than two points or no spread in time (a slope is undefined there).
    """
    n = len(ts)
    if n < 2 or n != len(ys):
        return None
    t0 = ts[0]
    mx = sum(t - t0 for t in ts) / n
    my = sum(ys) / n
    sxx = sxy = 0.0
    for t, y in zip(ts, ys):
        dx = t - t0 - mx
        sxx += dx * dx
        sxy += dx * (y - my)
    if sxx <= 0.0:
        return None
    return sxy / sxx


def monotonicity(ys: Sequence[float], segments: int = 8) -> float | None:
    """Share of rises (0-1) between consecutive segment means of ``ys``.

    Why segment means rather than raw consecutive differences: sample noise larger
    than the per-sample drift makes a genuine slow leak look like a coin toss, while
    the means of up to ``segments`` equal slices average the noise out.
    """
    n = len(ys)
    k = min(segments, n)
    if k < 3:
        return None
    rises, prev, lo = 0, 0.0, 0
    for i in range(1, k + 1):
        hi = i * n // k
        mean = sum(ys[lo:hi]) / (hi - lo)
        if i > 1 and mean > prev:
            rises += 1
        prev, lo = mean, hi
    return rises / (k - 1)


def time_to_full(used: float, total: float, rate_per_s: float | None) -> float | None:
    """Seconds until ``used`` reaches ``total`` at ``rate_per_s``; None when not growing."""
    if rate_per_s is None or rate_per_s <= 0.0:
        return None
    return max(total - used, 0.0) / rate_per_s
