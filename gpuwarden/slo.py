"""Service level objectives as error budgets, with multi-window, multi-burn-rate alerts.

The arithmetic of the Google SRE workbook, chapter "Alerting on SLOs"
(https://sre.google/workbook/alerting-on-slos/): an objective met by a fraction
``target`` of events leaves a budget of ``1 - target`` bad ones; the burn rate over a
window is the bad fraction there divided by the budget (1 = spending exactly the
budget over the SLO window); a burn rate ``b`` held for ``t`` spends ``b * t / window``
of the budget. An alert needs the burn rate over its long window AND its short window at
or above its factor: the long window says it matters, the short one that it is still
happening (so it resolves soon after the burn stops).

Events come from the inference records: a latency objective ("p99 ≤ 2.5 s") counts a
request good when its histogram bucket lies at or below the threshold — a threshold between
two bucket bounds is judged at the nearest bound **at or below** it (requests between that
bound and the next cannot be shown to meet it, so they count as bad, and how many there were
is reported as ``undecided``); an error-rate objective counts ``requests_failed`` against all
finished requests. Pure: no clock, no I/O. In the foundation because two rooms need the same
arithmetic: the streams' inference rules (burn-rate alerts) and the history's reports (budget
remaining over the SLO window, :func:`service_budgets`); the web console reads it too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from gpuwarden.config import Section
from gpuwarden.contract import InferenceMetrics, Tier
from gpuwarden.humantime import span
from gpuwarden.units import Duration

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")
_LATENCY_KEY = re.compile(r"^(ttft|itl|e2e|queue)_p(\d+(?:\.\d+)?)$")


def parse_fraction(value: Any) -> float:
    """``"1%"`` → 0.01; a bare number is a fraction (0.01). ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("expected a fraction such as 1% or 0.01")
    if isinstance(value, (int, float)):
        f = float(value)
    elif m := _PERCENT.match(str(value)):
        f = float(m.group(1)) / 100
    else:
        raise ValueError(f"expected a fraction such as 1% or 0.01, got {value!r}")
    if not 0 < f < 1:
        raise ValueError(f"expected a fraction between 0 and 100 %, got {value!r}")
    return f


Fraction = Annotated[float, BeforeValidator(parse_fraction)]


@dataclass(frozen=True)
class LatencyObjective:
    """``<metric>_p<q>: threshold``: a fraction ``q`` of requests within ``threshold_s``."""

    metric: str
    q: float
    threshold_s: float

    @property
    def budget(self) -> float:
        return 1.0 - self.q

    @property
    def key(self) -> str:
        """The config key it came from (``ttft_p99``): the name its events are kept under."""
        return f"{self.metric}_p{self.q * 100:g}"


class ServiceSlo(Section):
    """``engine.slo.<service>``: ``{ttft_p99: 2.5s, itl_p99: 100ms, error_rate: 1%, window: 30d}``.
    Latency keys are ``ttft|itl|e2e|queue`` + ``_p`` + a percentile (``ttft_p95``)."""

    latency: dict[str, Duration] = Field(default_factory=dict, description="filled from the <metric>_p<q> keys")
    error_rate: Fraction | None = Field(default=None, description="the budget of failed requests: 1% or 0.01")
    window: Duration = Field(default=30 * 86400.0, gt=0, description="the SLO window the budget is spent over")

    @model_validator(mode="before")
    @classmethod
    def _latency_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        latency = dict(data.pop("latency", {}) or {})
        for key in [k for k in data if isinstance(k, str) and _LATENCY_KEY.match(k)]:
            latency[key] = data.pop(key)
        for key in latency:
            m = _LATENCY_KEY.match(str(key))
            if m is None or not 0 < float(m.group(2)) < 100:
                raise ValueError(f"{key}: expected ttft, itl, e2e or queue, then _p and a percentile (ttft_p99)")
        data["latency"] = latency
        return data

    def objectives(self) -> list[LatencyObjective]:
        out = []
        for key, threshold in sorted(self.latency.items()):
            metric, _, q = key.partition("_p")
            out.append(LatencyObjective(metric, float(q) / 100, threshold))
        return out

    def budgets(self) -> dict[str, float]:
        """Each objective's key (``ttft_p99``, ``error_rate``) and its budget (bad fraction allowed)."""
        out = {o.key: o.budget for o in self.objectives()}
        if self.error_rate is not None:
            out["error_rate"] = self.error_rate
        return out


@dataclass(frozen=True)
class Events:
    """Good and total events over some span, and (latency) how many sat between the judged
    bound and the threshold's next bound, so could not be judged either way."""

    good: int
    total: int
    undecided: int = 0

    @property
    def bad(self) -> int:
        return self.total - self.good

    def __add__(self, other: "Events") -> "Events":
        return Events(self.good + other.good, self.total + other.total, self.undecided + other.undecided)


@dataclass(frozen=True)
class Judgement:
    """Where a latency threshold is judged on a histogram's bounds: at ``judged_at`` (the
    nearest bound at or below it; None below the lowest bound: no request can be shown good);
    ``exact`` when the threshold is a bound; ``next_bound`` the first bound above."""

    threshold_s: float
    judged_at: float | None
    next_bound: float | None
    exact: bool

    def note(self) -> str:
        if self.exact:
            return f"{self.threshold_s:g} s is a bucket bound: judged exactly"
        at = "no bound at or below it" if self.judged_at is None else f"judged at {self.judged_at:g} s"
        nxt = "" if self.next_bound is None else f"; requests in ({self.judged_at or 0:g}, {self.next_bound:g}] s " \
                                                   "cannot be told either way and count as bad"
        return f"{self.threshold_s:g} s lies between bucket bounds: {at} (the nearest bound at or below){nxt}"


def judge(bounds: tuple[float, ...], threshold_s: float) -> Judgement:
    below = [b for b in bounds if b <= threshold_s]
    above = [b for b in bounds if b > threshold_s]
    at = below[-1] if below else None
    return Judgement(threshold_s, at, above[0] if above else None, at == threshold_s)


def latency_events(bounds: Sequence[float], counts: Sequence[int], threshold_s: float) -> Events:
    """Requests within ``threshold_s`` (judged at the bound at or below it: :func:`judge`) of a
    histogram whose ``counts[i]`` fell in ``(bounds[i-1], bounds[i]]`` (one more count than
    bounds: the last is above the highest bound)."""
    j = judge(tuple(bounds), threshold_s)
    good = 0 if j.judged_at is None else sum(counts[:bounds.index(j.judged_at) + 1])
    undecided = 0
    if not j.exact and j.next_bound is not None:
        undecided = sum(counts[:bounds.index(j.next_bound) + 1]) - good
    return Events(good, sum(counts), undecided)


def error_events(finished: float, failed: float) -> Events:
    """Finished requests (``requests`` + ``requests_failed`` deltas) and the failed ones."""
    total = round(finished + failed)
    return Events(total - round(failed), total)


def record_events(record: InferenceMetrics, slo: ServiceSlo) -> dict[str, Events]:
    """One inference record's events per objective key (``ttft_p99``, ``error_rate``): what the
    streams add to a service's window and the reports sum over the SLO window."""
    out: dict[str, Events] = {}
    for obj in slo.objectives():
        for h in record.histograms:
            if h.name == obj.metric:
                out[obj.key] = out.get(obj.key, Events(0, 0)) + latency_events(h.bounds, h.counts, obj.threshold_s)
    ok = sum(c.delta for c in record.counters if c.name == "requests")
    failed = sum(c.delta for c in record.counters if c.name == "requests_failed")
    if slo.error_rate is not None and ok + failed:
        out["error_rate"] = error_events(ok, failed)
    return out


def burn_rate(events: Events, budget: float) -> float:
    """Bad fraction over budget; 0 with no events (nothing was served, nothing was spent)."""
    return 0.0 if events.total == 0 else (events.bad / events.total) / budget


def budget_remaining(events: Events, budget: float, seen: float = 1.0) -> float:
    """What is left of the SLO window's budget given its events: 1 untouched, 0 spent, below 0
    overspent. ``seen`` is the fraction of the window the events cover (a service watched for
    1 h of a 30 d window: 1/720): the traffic seen is taken as the window's rate, so 1 h at a
    14.4x burn spends 2 % (the workbook's figure), not 14.4 times the whole budget."""
    return 1.0 if events.total == 0 else 1.0 - (events.bad / events.total) / budget * seen


@dataclass(frozen=True)
class BurnAlert:
    """One multi-window pair: long AND short window at or above ``factor`` raise ``tier``."""

    name: str
    long_s: float
    short_s: float
    factor: float
    tier: Tier


#: The workbook's three pairs for a 30-day window: 2 % of the budget in 1 h (page), 5 % in 6 h,
#: 10 % in 3 d.
DEFAULT_ALERTS = (
    BurnAlert("fast_burn", 3600.0, 300.0, 14.4, Tier.CRITICAL),
    BurnAlert("slow_burn", 6 * 3600.0, 1800.0, 6.0, Tier.ATTENTION),
    BurnAlert("steady_burn", 3 * 86400.0, 6 * 3600.0, 1.0, Tier.INFO),
)


# --------------------------------------------------------------------------- budget remaining


@dataclass(frozen=True)
class Budget:
    """One objective of one service (and model) over the SLO window ending at ``until``: its
    events there and what is left of its budget. ``seen_s`` is how much of the window the
    history covers (from the service's first record, at most the window): a budget over 2 days
    seen of a 30-day window is said as such, never as the whole window's."""

    service: str
    model: str
    objective: str  # ttft_p99, error_rate: the config key
    budget: float  # the bad fraction allowed (1 - target)
    window_s: float
    seen_s: float
    events: Events
    until: float

    @property
    def target(self) -> float:
        """The good fraction the objective asks for (0.99)."""
        return 1.0 - self.budget

    @property
    def remaining(self) -> float:
        """1 untouched, 0 spent, below 0 overspent (:func:`budget_remaining`)."""
        return budget_remaining(self.events, self.budget, self.seen_s / self.window_s)

    @property
    def partial(self) -> bool:
        """The history covers less than the SLO window."""
        return self.seen_s < self.window_s

    def coverage(self) -> str:
        """``over the 30 d window`` or ``over the 2 d seen of a 30 d window``."""
        if not self.partial:
            return f"over the {span(self.window_s)} window"
        return f"over the {span(self.seen_s)} seen of a {span(self.window_s)} window"

    def values(self) -> dict[str, Any]:
        """A row for JSON and tables."""
        return {"service": self.service, "model": self.model, "objective": self.objective,
                "target": self.target, "budget": self.budget, "window_s": self.window_s, "seen_s": self.seen_s,
                "events": self.events.total, "bad": self.events.bad, "undecided": self.events.undecided,
                "remaining": self.remaining, "partial": self.partial, "coverage": self.coverage()}


def distinct(records: Iterable[InferenceMetrics]) -> Iterator[InferenceMetrics]:
    """Each scrape once, in event time: a record repeated (the spool, a redelivery) has the same
    ``(node, boot_id, seq)``."""
    seen: set[tuple[str, str, int]] = set()
    for r in sorted(records, key=lambda r: (r.ts, r.node, r.seq)):
        ident = (r.node, r.boot_id, r.seq)
        if ident not in seen:
            seen.add(ident)
            yield r


def service_budgets(records: Iterable[InferenceMetrics], slos: Mapping[str, ServiceSlo],
                    until: float) -> list[Budget]:
    """Each declared objective's budget per (service, model) over its SLO window ending at
    ``until``, summed over every node that serves it (the fleet's budget, not a replica's).
    Records at or after ``until`` are left out; records before the window count only for how
    much of it the history covers."""
    first: dict[tuple[str, str], float] = {}
    sums: dict[tuple[str, str], dict[str, Events]] = {}
    inside: set[tuple[str, str]] = set()  # served within the window
    for r in distinct(records):
        slo = slos.get(r.service)
        if slo is None or r.ts >= until:
            continue
        group = (r.service, r.model)
        first[group] = min(first.get(group, r.start_ts), r.start_ts)
        events = sums.setdefault(group, {key: Events(0, 0) for key in slo.budgets()})
        if r.ts >= until - float(slo.window):
            inside.add(group)
            for key, ev in record_events(r, slo).items():
                events[key] = events[key] + ev
    out = []
    for (service, model), events in sorted(sums.items()):
        if (service, model) not in inside:
            continue
        slo = slos[service]
        window = float(slo.window)
        seen = min(window, until - first[service, model])
        out += [Budget(service, model, key, budget, window, seen, events[key], until)
                for key, budget in slo.budgets().items()]
    return out
