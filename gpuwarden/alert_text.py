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

from gpuwarden.contract import AlertState, AlertTransition
from gpuwarden.humantime import span

LIKELY_CAUSE = " Likely cause: "
"""Joins a rule's summary and the summary of the cause that matched."""


class _Unknown:
    """Stands in for a name a template uses but this alert has no value for."""

    def __format__(self, spec: str) -> str:
        return "?"


class _Vars(dict):
    def __missing__(self, key: str) -> _Unknown:
        return _Unknown()


def is_update(t: AlertTransition) -> bool:
    """Whether ``t`` re-sends an open alert with a new likely cause (``streams/evaluate.py``): a
    firing of an episode that began before it. Counts of alerts raised skip these."""
    return t.state == AlertState.FIRING and t.ts > t.started_at


def fill(template: str, values: dict[str, Any]) -> str:
    """Fill ``{name}`` / ``{name:.1f}`` from labels and evidence; unknown names show as ``?``."""
    try:
        return string.Formatter().vformat(template, (), _Vars(values))
    except (ValueError, TypeError):
        return template


#: ``{checkpoint}``, said from the ``ckpt_released`` value the alert observed: none (no checkpoint
#: has ended in the last 30 min), 0, 1; where the evidence counts the checkpoints finished since
#: the growth began (``checkpoints``): none, that count (``{n}``), then after the last: not
#: released, released (nothing added when not judged).
CHECKPOINT_WORDS = ("no finished checkpoint seen", "not released after its last checkpoint",
                    "released after its last checkpoint",
                    "no checkpoint finished since it began", "checkpoints finished since it began: {n}",
                    ", not released after the last", ", released after the last")


def _checkpoint(done: float | None, released: float | None, words: tuple[str, ...]) -> str:
    if done is None:  # an alert written before checkpoints were counted
        return words[0 if released is None else 1 + int(released)]
    if not done:
        return words[3]
    return words[4].format(n=int(done)) + ("" if released is None else words[5 + int(released)])


def template_names(labels: dict[str, str], ev: dict[str, Any],
                   say_duration: Callable[[float], str] = span,
                   checkpoint_words: tuple[str, ...] = CHECKPOINT_WORDS) -> dict[str, Any]:
    """What a summary/action template may name: labels, evidence values (a value in seconds,
    ``time_to_oom_s``, also as words: ``time_to_oom``), ``held_for``, ``window``, slope, count,
    ``baseline_*``, ``checkpoint``. Also rebuilt from a transition to render it in another language."""
    released = ev["values"].get("ckpt_released")
    spoken = {k[:-2]: say_duration(v) for k, v in ev["values"].items() if k.endswith("_s") and v is not None}
    names: dict[str, Any] = {**labels, **spoken, **ev["values"], "held_for": say_duration(ev.get("held_for_s") or 0),
                             "window": say_duration(ev.get("window_s") or 0),
                             "checkpoint": _checkpoint(ev["values"].get("checkpoints"), released, checkpoint_words)}
    for k in ("slope", "slope_unit", "count"):
        if ev.get(k) is not None:
            names[k] = ev[k]
    if ev.get("baseline"):
        names.update({f"baseline_{k}": v for k, v in ev["baseline"].items()})
    return names
