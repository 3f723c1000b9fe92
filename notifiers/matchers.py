"""Label matching shared by routes, inhibition and silences (Alertmanager semantics).

A missing label matches as the empty string; regexes are anchored (full match).
``rule``, ``tier`` and ``fingerprint`` are matchable like labels.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import lru_cache

from gpuwarden.contract import AlertTransition, Matcher


def alert_labels(t: AlertTransition) -> dict[str, str]:
    return {**t.labels, "rule": t.rule, "tier": t.tier.value, "fingerprint": t.fingerprint}


@lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def matches(m: Matcher, labels: Mapping[str, str]) -> bool:
    v = labels.get(m.label, "")
    if m.op == "=":
        return v == m.value
    if m.op == "!=":
        return v != m.value
    hit = _regex(m.value).fullmatch(v) is not None
    return hit if m.op == "=~" else not hit


def matches_all(ms: Iterable[Matcher], labels: Mapping[str, str]) -> bool:
    return all(matches(m, labels) for m in ms)


def show(m: Matcher) -> str:
    return f"{m.label}{m.op}{m.value}"
