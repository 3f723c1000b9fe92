"""Robust per-class baselines: median and MAD over a bounded ring of recent summary values.

Why median/MAD: one pathological task (a leak, a starved loader) moves a mean
and a standard deviation a lot and a median hardly at all, and MAD bands are
scale-free across classes as different as inference and pre-training.
"""

from __future__ import annotations

from collections.abc import Iterable

MAD_TO_SIGMA = 1.4826


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    mid = n // 2
    return s[mid] if n % 2 else (s[mid - 1] + s[mid]) / 2.0


def median_mad(values: Iterable[float]) -> tuple[float, float, int]:
    """(median, median absolute deviation, count); raises ValueError when empty."""
    vals = list(values)
    if not vals:
        raise ValueError("no values")
    med = median(vals)
    return med, median([abs(v - med) for v in vals]), len(vals)


def band(med: float, mad: float, mads: float = 3.0, min_delta: float = 0.0,
         unit: str = "") -> tuple[float, float]:
    """The normal band ``median ± max(mads·1.4826·MAD, min_delta)``; a percentage's is clamped to
    [0, 100] (it judges the same: no percentage lies outside, and none is shown there)."""
    half = max(mads * MAD_TO_SIGMA * mad, min_delta)
    lo, hi = med - half, med + half
    if unit == "%":
        return max(lo, 0.0), min(hi, 100.0)
    return lo, hi
