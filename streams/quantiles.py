"""Quantiles from histogram buckets, said as honestly as the buckets allow.

A bucketed histogram knows how many observations fell between two bounds, nothing
finer. So the q-quantile (the smallest value with at least q of the observations at or
below it: numpy's ``inverted_cdf``) is known only to lie in one bucket, ``(lower, upper]``;
what we *state* is the bucket's upper bound ("p99 ≤ 2.5 s"), and an interpolated point
(linear within the bucket, as Prometheus' ``histogram_quantile`` does) is reported only as
an estimate and marked so. vLLM 0.10.2's TTFT buckets jump from 1.0 to 2.5 s: a p99 in
that bucket is "≤ 2.5 s", and whether it is under 2 s cannot be told from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Buckets:
    """Observation counts per bucket over some span: ``counts[i]`` fell in
    ``(bounds[i-1], bounds[i]]`` (the first from 0), ``counts[-1]`` above the highest bound."""

    bounds: tuple[float, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.counts) != len(self.bounds) + 1:
            raise ValueError(f"{len(self.counts)} counts for {len(self.bounds)} bounds (want bounds + 1)")

    @property
    def total(self) -> int:
        return sum(self.counts)


def merge(parts: Iterable[Buckets]) -> Buckets | None:
    """The sum of several intervals' buckets (one window); None for none. Intervals with other
    bounds (a server reconfigured) cannot be added bucket by bucket: ValueError."""
    out: Buckets | None = None
    for b in parts:
        if out is None:
            out = b
        elif b.bounds != out.bounds:
            raise ValueError(f"bucket bounds differ: {b.bounds} vs {out.bounds}")
        else:
            out = Buckets(out.bounds, tuple(x + y for x, y in zip(out.counts, b.counts)))
    return out


@dataclass(frozen=True)
class Quantile:
    """Where the q-quantile lies: in ``(lower, upper]``; ``upper`` is inf when it is above the
    highest bound. ``estimate`` is a linear interpolation inside that bucket (None above the
    highest bound): an estimate, never a measurement."""

    q: float
    lower: float
    upper: float
    estimate: float | None
    observations: int

    def bound(self, unit: str = "s") -> str:
        """Only what the buckets show: ``≤ 2.5 s``, or ``> 10 s`` above the highest bound."""
        return f"> {self.lower:g} {unit}" if math.isinf(self.upper) else f"≤ {self.upper:g} {unit}"

    def statement(self, unit: str = "s") -> str:
        """``p99 ≤ 2.5 s (in (1, 2.5] s; ≈1.9 s interpolated; 1200 observations)``."""
        name = f"p{self.q * 100:g}"
        if math.isinf(self.upper):
            return f"{name} > {self.lower:g} {unit} (above the highest bucket bound; {self.observations} observations)"
        est = "" if self.estimate is None else f"; ≈{self.estimate:.3g} {unit} interpolated"
        return (f"{name} ≤ {self.upper:g} {unit} (in ({self.lower:g}, {self.upper:g}] {unit}{est}; "
                f"{self.observations} observations)")


def quantile(buckets: Buckets, q: float) -> Quantile | None:
    """The bucket holding the q-quantile of ``buckets``; None when it holds no observations."""
    if not 0 < q < 1:
        raise ValueError(f"q must be in (0, 1), got {q}")
    n = buckets.total
    if n == 0:
        return None
    rank = q * n  # the ceil(rank)-th smallest observation is the quantile
    seen = 0
    for i, c in enumerate(buckets.counts):
        if c and seen + c >= rank:
            lower = buckets.bounds[i - 1] if i > 0 else 0.0
            if i == len(buckets.bounds):
                return Quantile(q, lower, math.inf, None, n)
            upper = buckets.bounds[i]
            return Quantile(q, lower, upper, lower + (upper - lower) * (rank - seen) / c, n)
        seen += c
    raise AssertionError("unreachable: the counts sum to n")
