"""Declarative rules: YAML model, precise validation, compilation to closures.

A rule file is validated by pydantic, then walked once more for what pydantic
cannot see (metrics unknown to the rule's scope, conditions a scope cannot
evaluate). Errors read ``FILE: rules[3].when.all[1].trend.window: expected a
duration …``. Compiled rules are plain closures over an evaluation context, so
the engine pays no parsing or dispatch cost per evaluation.
"""

from __future__ import annotations

import argparse
import operator
import re
import string
import sys
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError

from gpuwarden.contract import Tier
from gpuwarden.streams.config import StreamsSettings
from gpuwarden.units import Duration
from gpuwarden.streams.metrics import SCOPES

DEFAULT_RULES = Path(__file__).with_name("default_rules.yaml")
_CONDITIONS = ("all", "any", "not", "threshold", "trend", "growth", "deviation", "fall", "count_within")


class RulesError(ValueError):
    """A rules file that does not validate; ``problems`` are ``path: expectation`` lines."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source, self.problems = source, problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


Op = Literal[">", ">=", "<", "<=", "==", "!="]


class Threshold(_M):
    metric: str
    op: Op
    value: float
    agg: Literal["last", "avg", "min", "max", "range_rel"] = "last"
    window: Duration | None = None


class Trend(_M):
    metric: str
    window: Duration
    slope_above: float | None = None
    slope_below: float | None = None
    per: Duration = 3600.0
    monotonic_above: float | None = Field(default=None, ge=0, le=1)
    sustained: float | None = Field(default=None, ge=0)
    """Slope over the window's later half must be at least this share of the whole-window slope
    (rules out a decelerating approach to a new level, such as a GPU warming up)."""


class Growth(_M):
    """Growth of ``metric`` toward ``capacity``, seen for a share of the projected time to reach it
    (``gpuwarden.streams.growth``)."""

    metric: str
    capacity: str
    slope_above: float = Field(ge=0)
    per: Duration = 3600.0
    rise_above: float = Field(default=0.0, ge=0)
    """The growth over the window (slope times window) must exceed this, in the metric's unit:
    memory's own jitter over a few minutes projects a steep slope."""
    monotonic_above: float = Field(default=0.85, ge=0, le=1)
    sustained: float = Field(default=0.5, ge=0)
    hold_share: float = Field(default=0.02, gt=0, le=1)
    hold_min: Duration = 180.0
    hold_max: Duration = 7200.0


class Deviation(_M):
    metric: str
    direction: Literal["below", "above"]
    mads: float = Field(default=3.0, gt=0)
    min_delta: float = Field(default=0.0, ge=0)
    window: Duration = 900.0


class Fall(_M):
    """A job against its own recent past, not its class: any of ``metrics`` at most ``to_below``
    times its median over the ``reference`` before the ``window``, in every summary of the window
    (it fell and stayed there: a checkpoint or a short evaluation leaves one summary high).
    ``reference_at_least``: a metric whose median over the ``reference`` is below this (its unit)
    is not judged: a job that did next to no tensor work has none to lose, and noise around 1 %
    halves easily."""

    metrics: list[str] = Field(min_length=1)
    to_below: float = Field(gt=0, lt=1)
    window: Duration = 300.0
    reference: Duration = 3600.0
    reference_at_least: float = Field(default=0.0, ge=0)


class EventMatch(_M):
    kind: list[str] | None = None
    code: list[int] | None = None
    not_code: list[int] | None = None
    action: list[str] | None = None
    severity: list[Literal["info", "warning", "fatal"]] | None = None


class CountWithin(_M):
    event: EventMatch
    window: Duration
    at_least: int = Field(default=1, ge=1)
    per: Literal["gpu", "node"] = "gpu"


class AllOf(_M):
    all: list[Condition] = Field(min_length=1)


class AnyOf(_M):
    any: list[Condition] = Field(min_length=1)


class NotOf(_M):
    not_: Condition = Field(alias="not")


class ThresholdC(_M):
    threshold: Threshold


class TrendC(_M):
    trend: Trend


class GrowthC(_M):
    growth: Growth


class DeviationC(_M):
    deviation: Deviation


class FallC(_M):
    fall: Fall


class CountC(_M):
    count_within: CountWithin


def _which(v: Any) -> str | None:
    if isinstance(v, dict):
        keys = [k for k in v if k in _CONDITIONS]
        return f"<{keys[0]}>" if len(keys) == 1 and len(v) == 1 else None
    for k in _CONDITIONS:
        if isinstance(v, _WRAPPERS[k]):
            return f"<{k}>"
    return None


Condition = Annotated[
    Union[
        Annotated[AllOf, Tag("<all>")], Annotated[AnyOf, Tag("<any>")], Annotated[NotOf, Tag("<not>")],
        Annotated[ThresholdC, Tag("<threshold>")], Annotated[TrendC, Tag("<trend>")],
        Annotated[GrowthC, Tag("<growth>")], Annotated[DeviationC, Tag("<deviation>")],
        Annotated[FallC, Tag("<fall>")], Annotated[CountC, Tag("<count_within>")],
    ],
    Discriminator(_which, custom_error_type="condition",
                  custom_error_message="expected a mapping with exactly one of " + ", ".join(_CONDITIONS)),
]
_WRAPPERS = {"all": AllOf, "any": AnyOf, "not": NotOf, "threshold": ThresholdC, "trend": TrendC,
             "growth": GrowthC, "deviation": DeviationC, "fall": FallC, "count_within": CountC}
for _w in (AllOf, AnyOf, NotOf):
    _w.model_rebuild()


class Show(_M):
    """A value an alert's text shows without judging it (the clock a cap costs is judged; the
    power limit it is stated against is shown): recorded in the evidence at firing."""

    metric: str
    agg: Literal["last", "avg", "min", "max", "range_rel"] = "last"
    window: Duration | None = None


class Cause(_M):
    when: Condition
    summary: str
    action: str = ""
    show: list[Show] = Field(default_factory=list)
    """Values its summary names that its condition does not judge: recorded with it, only when it
    is the cause stated (a rule's own ``show`` is in every alert of the rule)."""


class RuleSpec(_M):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=128)
    scope: Literal["gpu", "task", "node", "class", "job", "rank"]
    tier: Tier
    when: Condition
    for_: Duration = Field(default=0.0, alias="for")
    keep_firing_for: Duration = 300.0
    labels: dict[str, str] = Field(default_factory=dict)
    summary: str
    action: str = ""
    resolved: str = ""
    """The summary of its resolve (figures measured then, and for a growth ``<metric>_peak``, the
    highest while it was open, and ``<metric>_released``); empty: ``summary`` filled again."""
    causes: list[Cause] = Field(default_factory=list)
    show: list[Show] = Field(default_factory=list)
    enabled: bool = True


class RuleFile(_M):
    version: Literal[1] = 1
    extends: Literal["default"] | None = None
    disable: list[str] = Field(default_factory=list)
    rules: list[RuleSpec] = Field(default_factory=list)


# --------------------------------------------------------------------------- validation


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for p in loc:
        if isinstance(p, str) and p.startswith("<"):
            continue  # discriminator tag, not a key the user wrote
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out or "<file>"


def _msg(e: dict[str, Any]) -> str:
    msg = e["msg"].removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def _walk(cond: Any, loc: str, scope: str, problems: list[str]) -> None:
    """Checks pydantic cannot make: metric names per scope and scope-bound conditions."""
    known = SCOPES[scope]
    if isinstance(cond, (AllOf, AnyOf)):
        key = "all" if isinstance(cond, AllOf) else "any"
        for i, c in enumerate(getattr(cond, key)):
            _walk(c, f"{loc}.{key}[{i}]", scope, problems)
    elif isinstance(cond, NotOf):
        _walk(cond.not_, f"{loc}.not", scope, problems)
    elif isinstance(cond, CountC):
        if scope not in ("gpu", "node"):
            problems.append(f"{loc}.count_within: events are counted in scope gpu or node, not {scope}")
    elif isinstance(cond, GrowthC):
        g = cond.growth
        if scope != "gpu":
            problems.append(f"{loc}.growth: growth is judged per GPU; use scope gpu")
            return
        for key in ("metric", "capacity"):
            metric = getattr(g, key)
            if known.get(metric) is None or known[metric].kind != "series":
                problems.append(f"{loc}.growth.{key}: expected a series metric of scope gpu, not {metric!r} "
                                f"(known: {', '.join(sorted(k for k, m in known.items() if m.kind == 'series'))})")
        if g.hold_min > g.hold_max:
            problems.append(f"{loc}.growth.hold_min: expected at most hold_max ({g.hold_max:g} s)")
    elif isinstance(cond, FallC):
        if scope != "class":
            problems.append(f"{loc}.fall: a job's own history is kept per task class; use scope class")
            return
        for i, metric in enumerate(cond.fall.metrics):
            if known.get(metric) is None or known[metric].kind != "series":
                problems.append(f"{loc}.fall.metrics[{i}]: expected a series metric of scope class, not "
                                f"{metric!r} (known: {', '.join(sorted(known))})")
    else:
        key, spec = next((k, getattr(cond, k)) for k in ("threshold", "trend", "deviation") if hasattr(cond, k))
        if spec.metric not in known:
            problems.append(f"{loc}.{key}.metric: unknown metric {spec.metric!r} for scope {scope} "
                            f"(known: {', '.join(sorted(known))})")
            return
        if key != "threshold" and known[spec.metric].kind != "series":
            problems.append(f"{loc}.{key}.metric: {spec.metric!r} is computed, not a series; use threshold")
        if key == "deviation" and scope != "class":
            problems.append(f"{loc}.deviation: baselines exist per task class; use scope class")
        if key == "trend" and spec.slope_above is None and spec.slope_below is None \
                and spec.monotonic_above is None:
            problems.append(f"{loc}.trend: expected at least one of slope_above, slope_below, monotonic_above")


def _shown(show: Show) -> ThresholdC:
    """A shown value as a threshold that holds whenever the value exists (NaN differs from every
    number): validated, kept in the windows and recorded in the evidence as a threshold is."""
    return ThresholdC(threshold=Threshold(metric=show.metric, op="!=", value=float("nan"), agg=show.agg,
                                          window=show.window))


def _check_templates(text: str, loc: str, problems: list[str]) -> None:
    try:
        list(string.Formatter().parse(text))
    except ValueError as e:
        problems.append(f"{loc}: not a valid template ({e})")


def validate(data: Any, source: str) -> RuleFile:
    """Validate parsed YAML; raises :class:`RulesError` listing every problem with its path."""
    try:
        rf = RuleFile.model_validate(data)
    except ValidationError as e:
        raise RulesError(source, [f"{_path(tuple(x['loc']))}: {_msg(x)}"
                                  for x in e.errors(include_url=False, include_input=False)]) from None
    problems: list[str] = []
    seen: set[str] = set()
    for i, r in enumerate(rf.rules):
        if r.name in seen:
            problems.append(f"rules[{i}].name: duplicate rule name {r.name!r}")
        seen.add(r.name)
        _walk(r.when, f"rules[{i}].when", r.scope, problems)
        for j, c in enumerate(r.causes):
            _walk(c.when, f"rules[{i}].causes[{j}].when", r.scope, problems)
        shows = [(f"rules[{i}].show[{j}]", sh) for j, sh in enumerate(r.show)]
        shows += [(f"rules[{i}].causes[{j}].show[{k}]", sh) for j, c in enumerate(r.causes) for k, sh in enumerate(c.show)]
        for loc, sh in shows:
            found: list[str] = []
            _walk(_shown(sh), loc, r.scope, found)
            problems += [p.replace(f"{loc}.threshold.", f"{loc}.", 1) for p in found]  # the key as written
        _check_templates(r.summary, f"rules[{i}].summary", problems)
        _check_templates(r.resolved, f"rules[{i}].resolved", problems)
    if problems:
        raise RulesError(source, problems)
    return rf


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise RulesError(str(path), [f"cannot read ({e.strerror})"]) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise RulesError(str(path), [f"{where}not valid YAML ({getattr(e, 'problem', e)})"]) from None


# --------------------------------------------------------------------------- compilation

Check = Callable[[Any], bool]
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq,
    "!=": operator.ne,
}


def _range_rel(ys: list[float]) -> float:
    mean = sum(ys) / len(ys)
    return (max(ys) - min(ys)) / abs(mean) if mean else 0.0


#: A threshold's aggregate over its window's values (non-empty).
_AGGS: dict[str, Callable[[list[float]], float]] = {
    "last": operator.itemgetter(-1), "avg": lambda ys: sum(ys) / len(ys), "min": min, "max": max,
    "range_rel": _range_rel,
}


def _r(v: float) -> float:
    """Evidence numbers rounded to 4 significant digits: readable and byte-stable."""
    return float(f"{v:.4g}")


def _compile(cond: Any, scope: str, evidence: bool = True) -> Check:
    """``cond`` as a closure over an evaluation context.

    Without ``evidence`` the closure only decides (records nothing in ``ctx.ev``, and a trend
    rejects on its cheaper test first): rules are evaluated that way, and only one that fires
    is evaluated again with evidence (the same truth: conditions only read state).
    """
    from gpuwarden.streams import trend as tr
    from gpuwarden.streams.baseline import band, median

    known = SCOPES[scope]
    if isinstance(cond, AllOf):
        parts = [_compile(c, scope, evidence) for c in cond.all]

        def all_of(ctx: Any) -> bool:
            for p in parts:
                if not p(ctx):
                    return False
            return True
        return all_of
    if isinstance(cond, AnyOf):
        parts = [_compile(c, scope, evidence) for c in cond.any]

        def any_of(ctx: Any) -> bool:
            for p in parts:
                if p(ctx):
                    return True
            return False
        return any_of
    if isinstance(cond, NotOf):
        inner = _compile(cond.not_, scope, evidence)
        return lambda ctx: not inner(ctx)
    if isinstance(cond, ThresholdC):
        t = cond.threshold
        op, name, value, win = _OPS[t.op], t.metric, t.value, t.window
        if known[name].kind == "scalar":
            def threshold_scalar(ctx: Any) -> bool:
                v = ctx.scalar(name)
                if v is None:
                    return False
                if evidence:
                    ctx.ev["values"][name] = _r(v)
                return op(v, value)
            return threshold_scalar

        aggregate, use_max = _AGGS[t.agg], t.agg == "max"
        key = name if t.agg == "last" else f"{name}_{t.agg}"

        def threshold(ctx: Any) -> bool:
            since = ctx.now - (win if win is not None else ctx.last_window)
            ts, ys = ctx.series(name, since, use_max)
            if not ys:
                return False
            # A windowed aggregate needs most of its window, or "avg over 30 min" holds after one minute.
            if win and win >= 4 * ctx.bucket_s and ts[0] - since > 0.25 * win + ctx.bucket_s:
                return False
            v = aggregate(ys)
            if evidence:
                ctx.ev["values"][key] = _r(v)
                if win:
                    ctx.note_window(win)
            return op(v, value)
        return threshold
    if isinstance(cond, TrendC):
        t = cond.trend
        name, win, per, mono_min = t.metric, t.window, t.per, t.monotonic_above
        unit = f"{known[name].unit}/{_per_label(per)}"

        def trend(ctx: Any) -> bool:
            ts, ys = ctx.series(name, ctx.now - win)
            # Demand most of the window, or a trend over 3 buckets would pass.
            if len(ts) < 4 or ts[-1] - ts[0] < 0.75 * win:
                return False
            mono = tr.monotonicity(ys)
            mono_ok = mono_min is None or (mono is not None and mono >= mono_min)
            if not evidence and not mono_ok:
                return False  # before the slope, which costs more
            s = tr.slope(ts, ys)
            if s is None:
                return False
            s *= per
            if evidence:
                ctx.ev["values"][name] = _r(ys[-1])
                ctx.ev["values"][f"{name}_start"] = _r(ys[0])
                ctx.ev["slope"], ctx.ev["slope_unit"] = _r(s), unit
                ctx.ev["monotonic"] = None if mono is None else round(mono, 3)
                ctx.note_window(win)
            if t.slope_above is not None and not s > t.slope_above:
                return False
            if t.slope_below is not None and not s < t.slope_below:
                return False
            if t.sustained is not None:
                half = len(ts) // 2
                late = tr.slope(ts[half:], ys[half:])
                if late is None or s == 0 or late * per / s < t.sustained:
                    return False
            return mono_ok
        return trend
    if isinstance(cond, GrowthC):
        return _compile_growth(cond.growth, known, evidence)
    if isinstance(cond, DeviationC):
        d = cond.deviation
        name, below = d.metric, d.direction == "below"

        def deviation(ctx: Any) -> bool:
            base = ctx.baseline(name)
            if base is None:
                return False  # class still learning: no deviation alerts
            _, ys = ctx.series(name, ctx.now - d.window)
            if not ys:
                return False
            # The baseline is a median of the class's per-summary values: the task is judged by
            # the same estimator over its own (a mean would count every checkpoint dip).
            v = median(ys)
            med, mad, n = base
            lo, hi = band(med, mad, d.mads, d.min_delta, known[name].unit)
            if evidence:
                ctx.ev["values"][name] = _r(v)
                ctx.ev["baseline"] = {"median": _r(med), "mad": _r(mad), "low": _r(lo), "high": _r(hi),
                                      "samples": n}
                ctx.note_window(d.window)
            return v < lo if below else v > hi
        return deviation
    if isinstance(cond, FallC):
        return _compile_fall(cond.fall, evidence)
    c = cond.count_within
    pred = _event_pred(c.event)
    win, at_least, per = c.window, c.at_least, c.per
    kinds = frozenset(c.event.kind) if c.event.kind else None

    def count_within(ctx: Any) -> bool:
        n = ctx.count_events(ctx.now - win, pred, per, kinds)
        if evidence:  # none counted is a figure too (a resolve says "0 in the last 60 min")
            ctx.ev["count"] = max(n, ctx.ev.get("count") or 0)
            ctx.note_window(win)
        return n >= at_least
    return count_within


def _compile_fall(f: Fall, evidence: bool) -> Check:
    from gpuwarden.streams.baseline import median

    win, ref, share, least = f.window, f.reference, f.to_below, f.reference_at_least

    def fall(ctx: Any) -> bool:
        start = ctx.now - win
        fell = False
        for name in f.metrics:
            ts, ys = ctx.series(name, start - ref)
            cut = bisect_right(ts, start)
            before, now = ys[:cut], ys[cut:]
            # Both spans mostly covered: a job younger than ~3/4 of an hour has no hour of its own.
            if not before or len(now) < 2 or ts[0] - (start - ref) > 0.25 * ref + ctx.bucket_s \
                    or ts[cut] - start > 0.25 * win + ctx.bucket_s:
                continue
            past, highest = median(before), max(now)
            if evidence:
                ctx.ev["values"][f"{name}_now"] = _r(highest)
                ctx.ev["values"][f"{name}_before"] = _r(past)
                ctx.note_window(win)
            if past > 0 and past >= least and highest <= share * past:
                fell = True
                if not evidence:
                    return True
        return fell
    return fall


def _compile_growth(g: Growth, known: dict, evidence: bool) -> Check:
    from gpuwarden.streams import growth as gr

    name, cap, per = g.metric, g.capacity, g.per
    unit = f"{known[name].unit}/{_per_label(per)}"
    knobs = {"rungs": tuple(gr.ladder(g.hold_min, g.hold_max)), "rate": g.slope_above / per,
             "rise": g.rise_above, "monotonic": g.monotonic_above, "sustained": g.sustained,
             "share": g.hold_share, "hold_min": g.hold_min, "hold_max": g.hold_max}

    def growth(ctx: Any) -> bool:
        minima = ctx.minima(name)
        _, caps = ctx.series(cap, ctx.now - ctx.last_window)
        if minima is None or not caps:
            return False
        v = gr.judge(minima, ctx.now, caps[-1], measure=evidence, **knobs)
        if v is None:
            return False
        if evidence:
            vals = ctx.ev["values"]
            vals[name], vals[f"{name}_start"] = _r(v.last), _r(v.start)
            if v.time_to_full_s is not None:
                vals["time_to_full_s"] = _r(v.time_to_full_s)
            ctx.ev["slope"], ctx.ev["slope_unit"] = _r(v.slope * per), unit
            ctx.ev["monotonic"] = None if v.monotonic is None else round(v.monotonic, 3)
            ctx.note_window(v.window_s)
            done = ctx.checkpoints_since(ctx.now - v.window_s)  # over the growth's own window
            if done is not None:
                vals["checkpoints"] = done
        return v.holds
    return growth


def _per_label(per: float) -> str:
    for secs, label in ((86400, "d"), (3600, "h"), (60, "min"), (1, "s")):
        if per == secs:
            return label
    return f"{per:g}s"


def _event_pred(m: EventMatch) -> Callable[[dict], bool]:
    kinds = set(m.kind) if m.kind else None
    codes = set(m.code) if m.code else None
    not_codes = set(m.not_code or ())
    actions = [re.compile(a, re.I) for a in m.action] if m.action else None
    sevs = set(m.severity) if m.severity else None

    def pred(e: dict) -> bool:
        if kinds is not None and e["kind"] not in kinds:
            return False
        if codes is not None and e["code"] not in codes:
            return False
        if e["code"] in not_codes:
            return False
        if sevs is not None and e["severity"] not in sevs:
            return False
        return actions is None or any(a.search(e["action"] or "") for a in actions)
    return pred


@dataclass
class Rule:
    """A compiled rule: the spec plus closures for its condition (``test`` decides, ``check``
    decides the same and records the evidence) and likely causes."""

    spec: RuleSpec
    check: Check
    causes: list[tuple[Check, Cause]]
    test: Check
    show: list[Check] = field(default_factory=list)
    name: str = ""
    for_s: float = 0.0
    keep_s: float = 0.0
    needs_events: bool = False  # the condition holds only if some event is counted

    def __post_init__(self) -> None:
        self.name, self.for_s, self.keep_s = self.spec.name, self.spec.for_, self.spec.keep_firing_for
        self.needs_events = _needs_events(self.spec.when)


@dataclass
class RulePack:
    """Compiled rules grouped by scope, in file order (which fixes output order)."""

    rules: list[Rule]
    source: str = "<default>"
    by_scope: dict[str, list[Rule]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_scope = {s: [r for r in self.rules if r.spec.scope == s] for s in SCOPES}

    def names(self) -> list[str]:
        return [r.name for r in self.rules]


@dataclass(frozen=True)
class Trigger:
    """An event that alone makes a rule hold (``arrival_trigger``): it matches ``pred`` and is
    counted ``per`` GPU or node."""

    pred: Callable[[dict], bool]
    per: str


def arrival_trigger(rule: Rule) -> Trigger | None:
    """The event that decides ``rule`` on its own, if one does: the rule has no ``for`` and its
    condition is a ``count_within`` of ``at_least: 1``, or an ``any`` whose first branch is one
    (a branch before it would put into the evidence values read from windows the buffer has not
    filled yet). Stage 1 judges these rules when the event arrives (``streams/arrival.py``)."""
    if rule.for_s:
        return None
    cond = rule.spec.when
    first = cond.any[0] if isinstance(cond, AnyOf) else cond
    if isinstance(first, CountC) and first.count_within.at_least == 1:
        return Trigger(_event_pred(first.count_within.event), first.count_within.per)
    return None


def _needs_events(cond: Any) -> bool:
    """Whether ``cond`` is false whenever no event is counted (a count_within needs at least one)."""
    if isinstance(cond, CountC):
        return True
    if isinstance(cond, AllOf):
        return any(_needs_events(c) for c in cond.all)
    if isinstance(cond, AnyOf):
        return all(_needs_events(c) for c in cond.any)
    return False


def leaves(cond: Any) -> list[Any]:
    """The leaf conditions (threshold, trend, growth, deviation, fall, count_within) under ``cond``."""
    if isinstance(cond, AllOf):
        return [x for c in cond.all for x in leaves(c)]
    if isinstance(cond, AnyOf):
        return [x for c in cond.any for x in leaves(c)]
    if isinstance(cond, NotOf):
        return leaves(cond.not_)
    return [cond]


def rule_leaves(rule: Rule) -> list[Any]:
    """Every leaf a rule can evaluate: its condition's and its likely causes'."""
    return [x for c in (rule.spec.when, *(cause.when for _, cause in rule.causes),
                        *map(_shown, rule.spec.show), *(_shown(x) for _, cause in rule.causes for x in cause.show))
            for x in leaves(c)]


def series_reach(rules: list[Rule]) -> dict[tuple[str, bool], float | None]:
    """How far back each (series metric, use_max) is read; ``None``: the latest buckets only.

    What a stage must keep of its windows for these rules (see ``BucketWindow.keep``).
    """
    reach: dict[tuple[str, bool], float | None] = {}

    def need(key: tuple[str, bool], window: float | None) -> None:
        old = reach.get(key)
        reach[key] = window if old is None else (old if window is None else max(old, window))

    for r in rules:
        for leaf in rule_leaves(r):
            if isinstance(leaf, ThresholdC) and SCOPES[r.spec.scope][leaf.threshold.metric].kind == "series":
                need((leaf.threshold.metric, leaf.threshold.agg == "max"), leaf.threshold.window)
            elif isinstance(leaf, TrendC):
                need((leaf.trend.metric, False), leaf.trend.window)
            elif isinstance(leaf, GrowthC):
                need((leaf.growth.capacity, False), None)
            elif isinstance(leaf, DeviationC):
                need((leaf.deviation.metric, False), leaf.deviation.window)
            elif isinstance(leaf, FallC):
                for metric in leaf.fall.metrics:
                    need((metric, False), leaf.fall.window + leaf.fall.reference)
    return reach


def growth_reach(rules: list[Rule]) -> dict[str, float]:
    """Per metric, the longest ``hold_max`` of the growth conditions on it: how long its minima are kept."""
    out: dict[str, float] = {}
    for r in rules:
        for leaf in rule_leaves(r):
            if isinstance(leaf, GrowthC):
                g = leaf.growth
                out[g.metric] = max(out.get(g.metric, 0.0), g.hold_max)
    return out


def event_reach(rules: list[Rule]) -> dict[str | None, float]:
    """Longest count-within window per event kind (``None``: rules that count any kind)."""
    out: dict[str | None, float] = {}
    for r in rules:
        for leaf in rule_leaves(r):
            if isinstance(leaf, CountC):
                c = leaf.count_within
                for kind in c.event.kind or [None]:
                    out[kind] = max(out.get(kind, 0.0), c.window)
    return out


def _cause(c: Cause, scope: str) -> Check:
    """A cause's condition; when it holds, its ``show`` values are recorded beside what it judged."""
    check, shows = _compile(c.when, scope), [_compile(_shown(x), scope) for x in c.show]
    if not shows:
        return check

    def shown(ctx: Any) -> bool:
        if not check(ctx):
            return False
        for show in shows:
            show(ctx)
        return True
    return shown


def compile_rules(rf: RuleFile, source: str) -> RulePack:
    rules = [Rule(s, _compile(s.when, s.scope), [(_cause(c, s.scope), c) for c in s.causes],
                  _compile(s.when, s.scope, evidence=False), [_compile(_shown(x), s.scope) for x in s.show])
             for s in rf.rules if s.enabled and s.name not in rf.disable]
    return RulePack(rules, source)


def load_rule_file(path: Path) -> RuleFile:
    rf = validate(_read(path), str(path))
    if rf.extends == "default":
        base = validate(_read(DEFAULT_RULES), str(DEFAULT_RULES))
        mine = {r.name: r for r in rf.rules}
        merged = [mine.pop(r.name, r) for r in base.rules] + list(mine.values())
        rf = RuleFile(rules=merged, disable=rf.disable)
    return rf


def load_rules(path: str | Path | None = None) -> RulePack:
    """Compile a rules file; None → the default pack. ``extends: default`` overrides per rule."""
    p = Path(path) if path is not None else DEFAULT_RULES
    return compile_rules(load_rule_file(p), str(p))


def cmd_check(args: argparse.Namespace, settings: StreamsSettings | None = None) -> int:
    """``gpuwarden rules check FILE``: exit 0 valid, 2 with one ``FILE: path: problem`` line each."""
    try:
        pack = load_rules(args.file)
    except RulesError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"{args.file}: ok ({len(pack.rules)} rules)")
    return 0
