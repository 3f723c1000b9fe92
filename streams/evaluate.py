"""Rule evaluation shared by both stages: the context closures read, and the alert loop.

A stage supplies a :class:`Context` subclass that knows where its series,
scalars, events and baselines live; :func:`evaluate` runs a scope's rules for
one entity at one event-time instant and returns the transitions.
"""

from __future__ import annotations

from typing import Any

from gpuwarden.alert_text import LIKELY_CAUSE, fill, template_names
from gpuwarden.contract import AlertTransition
from gpuwarden.streams.alerts import AlertSlot, fingerprint, step, transition
from gpuwarden.streams.growth import Minima
from gpuwarden.streams.rules import GrowthC, Rule, rule_leaves

#: A firing alert's likely cause is judged again at each evaluation while its condition holds, and
#: a changed one goes out as an update (a firing transition of the same episode, ``started_at``
#: unchanged, a later ``ts``), at most once per this long (event time) per alert.
REJUDGE_S = 120.0


class Context:
    """What a compiled condition may ask; evidence accumulates in ``ev``."""

    last_window = 30.0
    bucket_s = 15.0

    def __init__(self) -> None:
        self.now = 0.0
        self.ev: dict[str, Any] = {"values": {}}
        self._window = 0.0

    def reset(self, now: float) -> None:
        self.now = now
        self.ev = {"values": {}}
        self._window = 0.0

    def note_window(self, seconds: float) -> None:
        if seconds > self._window:
            self._window = seconds

    def evidence(self) -> dict[str, Any]:
        """A copy that later reads on this context (even by ``scalar``) cannot change."""
        ev = {**self.ev, "values": dict(self.ev["values"])}
        if self._window:
            ev["window_s"] = self._window
        return ev

    # Overridden per stage.
    def series(self, metric: str, since: float, use_max: bool = False) -> tuple[list[float], list[float]]:
        return [], []

    def scalar(self, metric: str) -> float | None:
        return None

    def count_events(self, since: float, pred: Any, per: str, kinds: frozenset | None = None) -> int:
        return 0

    def baseline(self, metric: str) -> tuple[float, float, int] | None:
        return None

    def minima(self, metric: str) -> Minima | None:
        """The entity's minima of ``metric`` per ``growth.STEP_S`` (growth conditions)."""
        return None

    def checkpoints_since(self, since: float) -> int | None:
        """How many of its task's checkpoints the SDK reported finished after ``since`` (None: not known here)."""
        return None

    def has_events(self) -> bool:
        """False only when ``count_events`` would count none, whatever it is asked."""
        return True


_FP_CACHE: dict[tuple[str, tuple], str] = {}


def _fp(rule: str, identity: dict[str, str], ident: tuple) -> str:
    key = (rule, ident)
    fp = _FP_CACHE.get(key)
    if fp is None:
        if len(_FP_CACHE) > 100_000:
            _FP_CACHE.clear()
        fp = _FP_CACHE[key] = fingerprint(rule, identity)
    return fp


def _judge(rule: Rule, ctx: Context, now: float) -> int:
    """The index of the first likely cause that holds at ``now`` (its figures left in ``ctx``), -1 none."""
    for i, (check, _) in enumerate(rule.causes):
        ctx.reset(now)
        if check(ctx):
            return i
    return -1


def _describe(rule: Rule, slot: AlertSlot, ctx: Context, labels: dict[str, str], now: float,
              held_s: float, template: str = "") -> None:
    """Evidence, summary and action from what the rule measures at ``now`` (``ctx`` holds it);
    ``template``: the summary's, if not the rule's own."""
    ev = ctx.evidence()
    ev["held_for_s"] = round(held_s, 3)
    spec = rule.spec
    if rule.show:
        ctx.reset(now)
        for show in rule.show:
            show(ctx)
        for k, v in ctx.ev["values"].items():
            ev["values"].setdefault(k, v)  # what the condition judged stands
    action, cause_text = spec.action, ""
    # A resolve in its own words says what happened, not a likely cause of what no longer holds.
    slot.cause, slot.described_at = (-1 if template else _judge(rule, ctx, now)), now
    if slot.cause >= 0:
        cause = rule.causes[slot.cause][1]
        cause_text, action = cause.summary, cause.action or action
        ev["values"].update(ctx.ev["values"])
    names = template_names(labels, ev)
    summary = fill(template or spec.summary, names)
    if cause_text:
        summary += LIKELY_CAUSE + fill(cause_text, names)
        ev["note"] = fill(cause_text, names)
    slot.evidence, slot.summary, slot.action = ev, summary, fill(action, names)


def _rejudged(rule: Rule, slot: AlertSlot, ctx: Context, now: float) -> bool:
    """Whether a firing alert whose condition still holds now shows a likely cause other than the
    one its last notice stated (judged on the same windows as at firing); then it is described
    again. A cause said is kept at least ``REJUDGE_S``, so one hovering at its threshold cannot
    flap, and is not withdrawn for none: that happens as the window leaves the phase that showed
    it, and the resolve says the figures then."""
    if now - (slot.described_at or slot.firing_since or now) < REJUDGE_S:
        return False
    cause = _judge(rule, ctx, now)
    if slot.cause is None:  # restored from state written before causes were re-judged
        slot.cause = cause
    if cause < 0 or cause == slot.cause:
        return False
    ctx.reset(now)
    rule.check(ctx)  # the condition's figures now, as at firing
    _describe(rule, slot, ctx, slot.labels, now, now - (slot.pending_since or now))
    return True


def _fire(rule: Rule, slot: AlertSlot, ctx: Context, labels: dict[str, str], now: float) -> None:
    """Freeze labels, evidence, summary and action at the firing instant."""
    merged = {**labels, **rule.spec.labels}
    slot.labels, slot.tier = merged, rule.spec.tier.value
    _describe(rule, slot, ctx, merged, now, now - (slot.pending_since or now))


def _resolve(rule: Rule, slot: AlertSlot, ctx: Context, now: float, started: float) -> None:
    """A resolve says the figures measured at resolution, not the firing's (the rules' summaries
    state figures, true whenever filled); ``held_for_s``: how long it fired."""
    ctx.reset(now)
    rule.check(ctx)  # records what it can measure now, whatever it decides
    values = ctx.ev["values"]
    for leaf in rule_leaves(rule):
        if isinstance(leaf, GrowthC) and (m := ctx.minima(leaf.growth.metric)) is not None:
            name = leaf.growth.metric
            seen = [v for t, v in zip(m.t, m.v) if t >= started]
            if seen and values.get(name) is not None:  # what the growth reached while open, and gave back
                values[f"{name}_peak"] = round(max(seen), 3)
                values[f"{name}_released"] = round(max(0.0, max(seen) - values[name]), 3)
    _describe(rule, slot, ctx, slot.labels, now, now - started, rule.spec.resolved)


def evaluate(rules: list[Rule], ctx: Context, now: float, identity: dict[str, str],
             labels: dict[str, str], alerts: dict[str, AlertSlot]) -> list[AlertTransition]:
    """Run ``rules`` for one entity at ``now``; ``alerts`` holds the open/pending slots by fingerprint."""
    out: list[AlertTransition] = []
    ident = tuple(identity.items())
    # Without events or slots, a rule that needs an event cannot hold and has nothing to step.
    quiet = not alerts and not ctx.has_events()
    ctx.reset(now)
    for rule in rules:
        if quiet and rule.needs_events:
            continue
        holds = rule.test(ctx)
        if not holds and not alerts:
            continue  # no slot to step (the usual case): no fingerprint needed
        fp = _fp(rule.name, identity, ident)
        slot = alerts.get(fp)
        if slot is None:
            if not holds:
                continue
            slot = alerts[fp] = AlertSlot(rule.name)
        started = slot.firing_since
        change = step(slot, now, holds, rule.for_s, rule.keep_s)
        if change == "firing":
            ctx.reset(now)
            rule.check(ctx)  # holds again, recording the evidence
            _fire(rule, slot, ctx, labels, now)
            out.append(transition(rule.name, fp, slot, "firing", now, now))
        elif change == "resolved":
            _resolve(rule, slot, ctx, now, started or now)
            out.append(transition(rule.name, fp, slot, "resolved", now, started or now))
        elif holds and rule.causes and started is not None and _rejudged(rule, slot, ctx, now):
            out.append(transition(rule.name, fp, slot, "firing", now, started))
        if slot.firing_since is None and slot.pending_since is None:
            del alerts[fp]
    return out


def fire_at(rule: Rule, ctx: Context, now: float, identity: dict[str, str],
            labels: dict[str, str]) -> AlertTransition | None:
    """The firing transition ``evaluate`` would give for ``rule`` (no ``for``) on a fresh slot at
    ``now``, or None when the condition does not hold: what stage 1 announces on an event's arrival."""
    ctx.reset(now)
    if not rule.check(ctx):
        return None
    slot = AlertSlot(rule.name)
    step(slot, now, True, rule.for_s, rule.keep_s)
    _fire(rule, slot, ctx, labels, now)
    return transition(rule.name, _fp(rule.name, identity, tuple(identity.items())), slot, "firing", now, now)


def resolve_all(alerts: dict[str, AlertSlot], now: float, why: str = "") -> list[AlertTransition]:
    """Resolve every firing slot of an entity that is gone (task ended, GPU expired); each
    resolve's ``held_for_s`` is how long it fired (the firing's evidence said how long it was pending)
    and its note starts with ``why`` (what happened: "the task ended")."""
    out = []
    for fp in list(alerts):
        slot = alerts[fp]
        if slot.firing_since is not None:
            note = slot.evidence.get("note")
            slot.evidence = {**slot.evidence, "held_for_s": round(now - slot.firing_since, 3)}
            if why:
                slot.evidence["note"] = f"{why}; {note}" if note else why
            out.append(transition(slot.rule, fp, slot, "resolved", now, slot.firing_since))
        del alerts[fp]
    return out
