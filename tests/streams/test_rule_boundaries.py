"""The rules' two boundaries, tested at the edge itself (scripts/mutation-check mutates both).

* ``count_within``: ``at_least`` events in the window fire, one fewer does not.
* A windowed ``threshold`` needs most of its window: it is judged when the first bucket lies
  exactly a quarter of the window plus one bucket after the window's start, and not when it lies
  later than that (streams/rules.py: "avg over 30 min" must not hold after one minute).
"""

from __future__ import annotations

from typing import Any

from gpuwarden.streams.evaluate import Context
from gpuwarden.streams.rules import compile_rules, validate

BUCKET_S = 15.0


class Fixed(Context):
    """A context over fixed inputs: one series (bucket start times, values) and a count of events."""

    bucket_s = BUCKET_S

    def __init__(self, now: float, ts: list[float] | None = None, ys: list[float] | None = None,
                 events: int = 0) -> None:
        super().__init__()
        self.reset(now)
        self.ts, self.ys, self.events = ts or [], ys or [], events

    def series(self, metric: str, since: float, use_max: bool = False) -> tuple[list[float], list[float]]:
        kept = [(t, y) for t, y in zip(self.ts, self.ys) if t >= since]
        return [t for t, _ in kept], [y for _, y in kept]

    def count_events(self, since: float, pred: Any, per: str, kinds: frozenset | None = None) -> int:
        return self.events


def rule(when: dict) -> Any:
    spec = {"name": "edge", "scope": "gpu", "tier": "attention", "summary": "x", "when": when}
    (compiled,) = compile_rules(validate({"rules": [spec]}, "test"), "test").rules
    return compiled


def test_count_within_fires_at_exactly_at_least_events() -> None:
    r = rule({"count_within": {"event": {"kind": ["xid"]}, "window": "1h", "at_least": 3}})
    assert [r.test(Fixed(3600.0, events=n)) for n in (2, 3, 4)] == [False, True, True]
    assert r.check(Fixed(3600.0, events=3)) is True


def test_windowed_threshold_is_judged_with_exactly_the_allowed_gap_and_not_one_bucket_more() -> None:
    win, now = 1200.0, 10_000.0  # 20 min: 80 buckets of 15 s, at least 4 buckets as the guard asks
    since = now - win
    r = rule({"threshold": {"metric": "util_gpu", "op": "<", "value": 5, "window": "20m"}})

    def covered_from(first: float) -> Fixed:
        ts = [first + i * BUCKET_S for i in range(int((now - first) / BUCKET_S))]
        return Fixed(now, ts, [1.0] * len(ts))

    edge = since + 0.25 * win + BUCKET_S  # the largest gap the guard allows
    assert r.test(covered_from(edge)) is True
    assert r.test(covered_from(edge + BUCKET_S)) is False
