"""Two rule sets over the same records: which alerts one gains or loses, and who detects first.

Alerts are matched by fingerprint (rule name + identifying labels), so a rule
file that changes a rule's thresholds but keeps its name compares episode by
episode: the n-th firing of a fingerprint under A pairs with the n-th under B.
The detection delay of a pair is B's firing time minus A's (event time):
negative means B catches it earlier.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwarden.contract import AlertState, AlertTransition


@dataclass(frozen=True, slots=True)
class Detection:
    """One firing episode: when an alert first fired."""

    fingerprint: str
    rule: str
    tier: str
    fired_at: float
    labels: dict[str, str]
    summary: str


@dataclass(frozen=True, slots=True)
class Pair:
    a: Detection
    b: Detection

    @property
    def delay_s(self) -> float:
        return self.b.fired_at - self.a.fired_at


@dataclass(slots=True)
class Comparison:
    a_name: str
    b_name: str
    gained: list[Detection] = field(default_factory=list)
    lost: list[Detection] = field(default_factory=list)
    both: list[Pair] = field(default_factory=list)
    transitions: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({
            "a": self.a_name, "b": self.b_name, "transitions": self.transitions,
            "gained": [asdict(d) for d in self.gained], "lost": [asdict(d) for d in self.lost],
            "both": [{"fingerprint": p.a.fingerprint, "rule": p.a.rule, "labels": p.a.labels,
                      "a_fired_at": p.a.fired_at, "b_fired_at": p.b.fired_at, "delay_s": p.delay_s,
                      "a_tier": p.a.tier, "b_tier": p.b.tier} for p in self.both],
        }, sort_keys=True)

    def to_text(self) -> str:
        lines = [f"A = {self.a_name}: {self.transitions.get('a', 0)} transitions; "
                 f"B = {self.b_name}: {self.transitions.get('b', 0)} transitions",
                 f"gained by B: {len(self.gained)}   lost by B: {len(self.lost)}   in both: {len(self.both)}"]
        for title, items in (("gained (B only)", self.gained), ("lost (A only)", self.lost)):
            if items:
                lines.append(f"\n{title}:")
                lines += [f"  {_t(d.fired_at)}  {d.tier:9} {d.rule:28} {_labels(d.labels)}" for d in items]
        if self.both:
            lines.append("\nin both (delay = B fired − A fired):")
            lines += [f"  {p.delay_s:+8.0f} s  {p.a.rule:28} {_labels(p.a.labels)}" for p in self.both]
        return "\n".join(lines) + "\n"


def _t(ts: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts))


def _labels(labels: dict[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def detections(transitions: Iterable[AlertTransition]) -> dict[str, list[Detection]]:
    """Firing episodes per fingerprint, in event-time order."""
    out: dict[str, list[Detection]] = defaultdict(list)
    for t in sorted(transitions, key=lambda t: t.ts):
        if t.state == AlertState.FIRING:
            out[t.fingerprint].append(Detection(t.fingerprint, t.rule, t.tier.value, t.ts,
                                                dict(t.labels), t.summary))
    return out


def compare(a: list[AlertTransition], b: list[AlertTransition], a_name: str = "A",
            b_name: str = "B") -> Comparison:
    da, db = detections(a), detections(b)
    c = Comparison(a_name, b_name, transitions={"a": len(a), "b": len(b)})
    for fp in sorted(set(da) | set(db)):
        ea, eb = da.get(fp, []), db.get(fp, [])
        c.both += [Pair(x, y) for x, y in zip(ea, eb)]
        c.lost += ea[len(eb):]
        c.gained += eb[len(ea):]
    key: Callable[[Any], Any] = lambda d: (d.fired_at, d.fingerprint)  # noqa: E731
    c.gained.sort(key=key)
    c.lost.sort(key=key)
    c.both.sort(key=lambda p: key(p.a))
    return c


def replay_both(records: list[Any], engine_a: Any, engine_b: Any, a_name: str = "A",
                b_name: str = "B") -> tuple[Comparison, list[AlertTransition], list[AlertTransition]]:
    """Run the same records through two engines (one per rules file) and compare their transitions."""
    runs = []
    for engine in (engine_a, engine_b):
        runs.append(engine.process_many(records) + engine.flush())
    return compare(runs[0], runs[1], a_name, b_name), runs[0], runs[1]
