"""How an alert's summary and action are written from a rule's templates.

The engine fills them in English when an alert fires; the notifiers fill the
same names into a translated template when the reader wants another language.
Both must agree to the byte on the names and the words, so the filling lives
here once.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

LIKELY_CAUSE = " Likely cause: "
"""Joins a rule's summary and the summary of the cause that matched."""


class _Unknown:
    """Stands in for a name a template uses but this alert has no value for."""

    def __format__(self, spec: str) -> str:
        return "?"


class _Vars(dict):
    def __missing__(self, key: str) -> _Unknown:
        return _Unknown()


def fill(template: str, values: dict[str, Any]) -> str:
    """Fill ``{name}`` / ``{name:.1f}`` from labels and evidence; unknown names show as ``?``."""
    try:
        return string.Formatter().vformat(template, (), _Vars(values))
    except (ValueError, TypeError):
        return template


def humanize(seconds: float, units: tuple[str, str, str] = ("s", "min", "h")) -> str:
    """``45 s``, ``12 min``, ``3.5 h`` (``units``: the words for seconds, minutes, hours)."""
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} {units[0]}"
    if seconds < 7200:
        return f"{seconds // 60} {units[1]}"
    return f"{seconds / 3600:.1f} {units[2]}"


def template_names(labels: dict[str, str], ev: dict[str, Any],
                   say_duration: Callable[[float], str] = humanize) -> dict[str, Any]:
    """What a summary/action template may name: labels, evidence values, ``held_for``, ``window``,
    slope, count, ``baseline_*``. Also rebuilt from a transition to render it in another language."""
    names: dict[str, Any] = {**labels, **ev["values"], "held_for": say_duration(ev.get("held_for_s") or 0),
                             "window": say_duration(ev.get("window_s") or 0)}
    for k in ("slope", "slope_unit", "count"):
        if ev.get(k) is not None:
            names[k] = ev[k]
    if ev.get("baseline"):
        names.update({f"baseline_{k}": v for k, v in ev["baseline"].items()})
    return names
