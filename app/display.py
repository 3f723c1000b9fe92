"""What the terminal view and the web console share about showing numbers: units, bands
clamped to what a metric allows, figures rounded for reading.

Only the display clamps: the engine's numbers (and a band's evidence) stay as computed, a
``50–126 %`` band is shown ``50–100 %`` because utilization cannot pass 100.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwarden.contract import AlertTransition, Baseline
from gpuwarden.streams.metrics import SCOPES
from gpuwarden.streams.view import NodeView

_UNITS = {name: m.unit for scope in SCOPES.values() for name, m in scope.items()}
_LIMITS = {"%": (0.0, 100.0), "fraction": (0.0, 1.0)}
_TIER_ORDER = ("critical", "attention", "info")


def unit(metric: str) -> str:
    """The metric's unit as the rules' vocabulary states it (``%``, ``GiB``, ``fraction``...)."""
    return _UNITS.get(metric, "")


def clamp(metric: str, value: float) -> float:
    """``value`` within what ``metric`` can take: 0–100 for percentages, 0–1 for fractions, never below 0."""
    lo, hi = _LIMITS.get(unit(metric), (0.0, float("inf")))
    return min(max(value, lo), hi)


def figure(value: float | None, unit_name: str = "") -> str:
    """A number as a reader wants it: fractions as percentages, whole numbers from 10 up, two decimals under 1."""
    if value is None:
        return "-"
    if unit_name == "fraction":
        return f"{value * 100:.0f} %"
    digits = 0 if abs(value) >= 10 or value == 0 else 1 if abs(value) >= 1 else 2
    return f"{value:.{digits}f}" + (f" {unit_name}" if unit_name else "")


def band(metric: str, b: Baseline | None) -> str:
    """``median (low–high) unit`` with the band clamped to the metric's range; ``learning`` without one."""
    if b is None:
        return "learning"
    u = unit(metric)
    lo, hi = clamp(metric, b.low), clamp(metric, b.high)
    if u == "fraction":
        return f"{b.median * 100:.0f} % ({lo * 100:.0f}–{hi * 100:.0f} %)"
    return f"{figure(b.median)} ({figure(lo)}–{figure(hi)}{' ' + u if u else ''})"


def urgency(a: AlertTransition) -> tuple[int, float]:
    """The order alerts are shown in: critical first, then attention, then info; older first within a tier."""
    return (_TIER_ORDER.index(a.tier.value), a.started_at)


def fleet_words(nodes: Sequence[NodeView], names: bool = True) -> str:
    """The fleet's size in the same words everywhere (the live view, the console, the run's
    summary): nodes with GPU samples and their GPUs, then the nodes only a scheduler reported
    (a partition's nodes that no agent samples: counted and named, never shown as empty tables);
    ``names=False`` leaves their names out where the line is short."""
    sampled = [n for n in nodes if n.gpus]
    only = sorted(n.node for n in nodes if not n.gpus)
    gpus = sum(len(n.gpus) for n in sampled)
    words = f"{len(sampled)} node{'s' * (len(sampled) != 1)} with {gpus} GPU{'s' * (gpus != 1)} sampled"
    if only:
        words += f"; {len(only)} known only from the scheduler" + (f" ({', '.join(only)})" if names else "")
    return words
