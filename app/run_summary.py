"""What ``gpuwarden run`` (and so ``make demo``) ends with, in a terminal or not: a few lines
that fit ``WIDTH`` columns saying what the run covered, which alerts fired by tier (one line a
tier), the baselines that formed and where to look next.

Without a terminal the live view's last frame was all a run left (clipped to 80×25, "+ 24 more
GPUs" with no rows, no list of what fired: #33); these lines are the same with or without one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuwarden.app.display import fleet_words
from gpuwarden.alert_text import is_update
from gpuwarden.contract import AlertState, AlertTransition
from gpuwarden.humantime import span
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.view import node_view

WIDTH = 100
TIERS = "Tiers: critical pages on-call now, attention goes to the task owner's chat, info is only recorded."
_ORDER = ("critical", "attention", "info")


@dataclass
class Fired:
    """The alerts a run raised: firing transitions counted by (tier, rule), as the notifier
    recorded them in the spool's alert log (the console's history: with its repeat-offender
    alerts, without updates of an open alert), not as the engine emitted them."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)

    def add(self, t: AlertTransition) -> None:
        if t.state == AlertState.FIRING and not is_update(t):  # an update is no new alert
            self.counts[(t.tier.value, t.rule)] += 1

    @classmethod
    def of(cls, log: Iterable[AlertTransition]) -> Fired:
        fired = cls()
        for t in log:
            fired.add(t)
        return fired


def fit(head: str, items: list[str], width: int = WIDTH) -> str:
    """``head`` then as many whole ``items`` as fit ``width``, then "+ N more" (never a cut word)."""
    for k in range(len(items), -1, -1):
        rest = len(items) - k
        line = head + ", ".join(items[:k]) + (f"{', ' if k else ''}+ {rest} more" if rest else "")
        if len(line) <= width or k == 0:
            return line
    return head  # unreachable: k == 0 returns


def summary(engine: Engine, fired: Fired, span_s: float, where: str) -> list[str]:
    """The run's closing lines; ``where`` is the command that shows the same run in a browser."""
    nodes = [node_view(st) for n in engine.nodes.nodes() if (st := engine.nodes.state(n)) is not None]
    lines = [f"Ran {span(span_s)} of event time on {fleet_words(nodes)}."]
    if len(lines[0]) > WIDTH:
        lines = [f"Ran {span(span_s)} of event time on {fleet_words(nodes, names=False)}."]
    lines.append(TIERS)
    total = sum(fired.counts.values())
    still = len(engine.open_alerts())
    lines.append(f"Alerts that fired: {total}, {still} still open at the end." if total else "No alert fired.")
    for tier in _ORDER:
        rules = sorted(((n, r) for (t, r), n in fired.counts.items() if t == tier), key=lambda x: (-x[0], x[1]))
        if rules:
            lines.append(fit(f"  {tier:<9} {sum(n for n, _ in rules):>3}  ",
                             [f"{r} x{n}" if n > 1 else r for n, r in rules]))
    classes = sorted((c, b) for c in engine.classes.classes() if (b := engine.classes.baseline(c).get("util_gpu")))
    waits = sorted((k, v) for c in engine.scheduler.clusters() if (f := engine.scheduler.figures(c))
                   for k, v in f.baselines.items())
    if classes:
        lines.append(fit(f"Baselines formed: {len(classes)} task class{'es' * (len(classes) != 1)}, median GPU util ",
                         [f"{c} {b.median:.0f} %" for c, b in classes]))
    else:
        lines.append("No task-class baseline formed yet: a class needs 30 min of its tasks (the demo's config).")
    if waits:
        lines.append(fit(f"  and {len(waits)} scheduler queue{'s' * (len(waits) != 1)}, median wait ",
                         [f"{k} {span(v)}" for k, v in waits]))
    lines.append(f"Next: {where}" if len(where) < WIDTH - 6 else "Next: gpuwarden web, with this run's --config")
    lines.append("  shows the same run in a browser: these alerts with their charts, the baselines, the queues.")
    return lines


def where_to_look(config: str | None) -> str:
    """The console's command for this run's config."""
    return f"gpuwarden web --config {config}" if config else "gpuwarden web"
