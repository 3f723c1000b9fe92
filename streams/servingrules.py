"""The inference rules: SLO burn rates per service (every node's events summed, the service
stage) and the serving engines' composite signs per service on a node (the inference stage).

Each rule reads one service's windows (:class:`ServiceWindow`) at a minute boundary ``now``
and says whether it holds, with its evidence; the stage steps the alert slots and fills the
rule's summary and action templates (:data:`TEXT`) from the alert's labels and evidence, as
the rule pack's are filled, so the notifiers render them in another language the same way
(``notifiers/default_rules.zh-CN.yaml``). Quantiles
are said as the buckets allow (``p99 ≤ 2.5 s``; an interpolated figure is marked as one),
and a comparison of two quantiles only claims a change when the buckets show it: the new
quantile's bucket lies wholly above the old one's (docs/inference.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.alert_text import fill, template_names
from gpuwarden.contract import AlertTransition, Tier
from gpuwarden.slo import DEFAULT_ALERTS, BurnAlert, Events, ServiceSlo, budget_remaining, burn_rate
from gpuwarden.streams.alerts import AlertSlot, step, transition
from gpuwarden.streams.quantiles import Buckets, Quantile, quantile
from gpuwarden.streams.servicewindow import HOUR_S, MINUTE_S, ServiceWindow

#: A burn-rate pair needs this many events in its long window (a handful of requests, one
#: failed, is not a burn).
MIN_EVENTS = 100
NODES_SAID = 4  # a burn alert's note names the nodes burning most, up to this many
#: Observations a quantile comparison needs in each window (p99 of fewer is one or two requests).
MIN_TAIL_OBS = 500
MIN_RESTART_OBS = 200
#: The tail now is the last 5 min, held 1 min: judged on the last 10 min and held 5, it came 433 s
#: after a real tail crossed its objective (issue #30); now within 5 min of the crossing.
TAIL_NOW_S, TAIL_REF_S, TAIL_FOR_S = 300.0, 3600.0, 60.0
#: An objective over its target over this window (its bad share above the budget: the p99 above
#: the threshold) is attention whatever the burn-rate pairs say: a 1.5x burn for minutes is below
#: every pair's factor by design, yet the service misses its objective now.
OVER_S = 300.0
TAIL_RATIO = 2.0  # interpolated p99 at least this many times the reference's
MEAN_FLAT = 0.2  # the mean within ±20 % of the reference's counts as flat
KV_SATURATED = 0.9
KNEE_S = 300.0
QUEUE_DRAINING = 0.8  # the queue "grows" unless it fell below this share of the 5 min before
PREEMPT_NOW_S, PREEMPT_MIN = 600.0, 10
FAIL_S, FAIL_MIN, FAIL_SHARE = 300.0, 10, 0.05
RESTART_BASE_S, RESTART_JUDGED_S, RESTART_NOW_S = 3600.0, 6 * HOUR_S, 900.0
RESTART_Q, RESTART_RATIO = 0.9, 1.5
BATCH_FULL = 0.95
TAIL_METRICS = ("ttft", "e2e")


@dataclass(frozen=True)
class Text:
    """A rule's English summary and action templates (names: labels, evidence values, ``window``)."""

    summary: str
    action: str


_BURN_ACTION = ("at this rate the budget is gone in {exhaust_h:.3g} h: find what changed (a deploy, the load, "
                "a GPU) and roll back or shed load")
_BURN = ("{service}: the {objective} objective burns its error budget at {burn_long:.3g}x over {window} across "
         "{nodes:g} node(s) ({burn_short:.3g}x over the last {short_min:g} min; alert at {factor:g}x; {worst_node} "
         "burns most, at {worst_burn:.3g}x): {budget_left_pct:.3g} % of the {slo_window_d:g} d budget left")
TEXT: dict[str, Text] = {
    "slo-fast-burn": Text(_BURN, _BURN_ACTION),
    "slo-slow-burn": Text(_BURN, _BURN_ACTION),
    "slo-steady-burn": Text(_BURN, _BURN_ACTION),
    "slo-over-target": Text(
        "{service}: the {objective} objective is over its target over the last 5 min: {bad:g} of {events:g} "
        "requests missed it ({bad_pct:.3g} %, {allowed_pct:.3g} % allowed; a {burn:.3g}x burn, across {nodes:g} "
        "node(s))",
        "the service misses its objective now, whatever the budget says: find what changed (a deploy, the load, "
        "a GPU) and shed load or roll back"),
    "inference-tail-rising": Text(
        "{service} on {node}: {metric} tail rising while the mean is flat: p99 ≤ {p99_upper:g} s (in ({p99_lower:g}, "
        "{p99_upper:g}] s; ≈{p99_interpolated:.3g} s interpolated) over the last 5 min against p99 ≤ "
        "{p99_ref_upper:g} s (in ({p99_ref_lower:g}, {p99_ref_upper:g}] s) in the hour before; mean "
        "{mean_s:.3g} s vs {mean_ref_s:.3g} s",
        "the average hides the tail: look at the slowest requests (long prompts, a hot replica, a noisy neighbour "
        "on the GPU, preemptions)"),
    "inference-kv-knee": Text(
        "{service} on {node}: at the capacity knee: KV cache {kv_pct:.3g} % used and {requests_waiting:.3g} "
        "requests waiting (mean over 5 min; {requests_waiting_before:.3g} the 5 min before)",
        "add replicas or reduce max batch (max_num_seqs) so requests stop queueing behind a full KV cache"),
    "inference-preemptions": Text(
        "{service} on {node}: preemptions rising: {preemptions:g} in the last 10 min ({per_min:.3g}/min against "
        "{per_min_ref:.3g}/min in the hour before)",
        "the KV cache is too small for the batch: reduce max batch or add replicas"),
    "inference-failures": Text(
        "{service} on {node}: {failed:g} of {finished:g} requests failed in 5 min ({share_pct:.3g} %)",
        "read the server's log for the failures (out of memory, a bad request, timeouts)"),
    "inference-batch-full": Text(
        "{service} on {node}: the batch is full: {requests_running:.3g} requests running of a configured maximum "
        "of {max_batch:g} ({fill_pct:.3g} %), {requests_waiting:.3g} waiting",
        "add replicas, or raise max batch if the KV cache has room (it is not the limit here)"),
    "inference-restarted": Text(
        "{service} on {node}: a new serving process (its counters started again or its pid changed)",
        "a deploy, or a crash (CUDA out of memory is the usual one): the server's log says which"),
    "inference-ttft-regression": Text(
        "{service} on {node}: TTFT regressed after the new process: p90 ≤ {p90_upper:g} s (in ({p90_lower:g}, "
        "{p90_upper:g}] s; ≈{p90_interpolated:.3g} s interpolated) since, against p90 ≤ {p90_before_upper:g} s "
        "(in ({p90_before_lower:g}, {p90_before_upper:g}] s) in the hour before",
        "compare the deploy's changes (model, engine version, flags such as max_num_seqs); roll back"),
}
#: Every rule this module judges (docs/rules.md has a row for each).
RULES = tuple(TEXT)


@dataclass
class Verdict:
    """One rule on one service at ``now``: whether it holds and, when it does, its evidence."""

    rule: str
    tier: Tier
    holds: bool
    identity: dict[str, str] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # more labels at firing (not in the fingerprint)
    for_s: float = 0.0
    keep_s: float = 0.0


@dataclass(frozen=True)
class Restart:
    """The newest new process of a service, and its TTFT buckets in the hour before."""

    at: float
    why: str
    bounds: tuple[float, ...] | None = None
    counts: tuple[int, ...] | None = None


def _window(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", HOUR_S), ("min", MINUTE_S)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


# --------------------------------------------------------------------------- SLO burn rates


@dataclass(frozen=True)
class PairBurn:
    """One workbook pair's burn rates over its long and short windows."""

    alert: BurnAlert
    long: Events
    short: Events
    long_burn: float
    short_burn: float

    @property
    def holds(self) -> bool:
        return self.long.total >= MIN_EVENTS and self.long_burn >= self.alert.factor \
            and self.short_burn >= self.alert.factor


@dataclass(frozen=True)
class ObjectiveBurn:
    """One objective of a service at ``now``: its budget, what is left of it over the SLO
    window, and each pair's burn rates (what the rules judge and the console shows)."""

    key: str
    target: str
    """The objective as a person reads it (``99 % of requests' ttft ≤ 2.5 s``)."""
    budget: float
    window_s: float
    remaining: float
    pairs: tuple[PairBurn, ...]


def objective_burns(win: ServiceWindow, slo: ServiceSlo, now: float,
                    alerts: tuple[BurnAlert, ...] = DEFAULT_ALERTS) -> list[ObjectiveBurn]:
    """Every objective the service declares, with every pair's burn rates at ``now``."""
    window = float(slo.window)
    seen = min(window, now - (win.first_ts if win.first_ts is not None else now))
    targets = {o.key: f"{o.q * 100:g} % of requests' {o.metric} ≤ {o.threshold_s:g} s" for o in slo.objectives()}
    out = []
    for key, budget in slo.budgets().items():
        target = targets.get(key, f"at most {budget * 100:g} % of requests failed")
        left = budget_remaining(win.events(key, now - window, now), budget, seen / window if window else 1.0)
        pairs = []
        for a in alerts:
            long_ev, short_ev = win.events(key, now - a.long_s, now), win.events(key, now - a.short_s, now)
            pairs.append(PairBurn(a, long_ev, short_ev, burn_rate(long_ev, budget), burn_rate(short_ev, budget)))
        out.append(ObjectiveBurn(key, target, budget, window, left, tuple(pairs)))
    return out


def burn_verdicts(win: ServiceWindow, slo: ServiceSlo, now: float, nodes: Mapping[str, ServiceWindow],
                  notes: Mapping[str, str], alerts: tuple[BurnAlert, ...] = DEFAULT_ALERTS) -> list[Verdict]:
    """Every objective × every workbook pair (fast: critical, slow: attention, steady: info) on a
    service's events summed over its nodes (``win``); ``nodes`` holds each node's own, for the
    evidence (how many served it, which burns most), ``notes`` how each latency threshold is
    judged on the buckets."""
    out = []
    for o in objective_burns(win, slo, now, alerts):
        key, budget, left, window = o.key, o.budget, o.remaining, o.window_s
        for p in o.pairs:
            a, lb, sb, long_ev = p.alert, p.long_burn, p.short_burn, p.long
            v = Verdict(f"slo-{a.name.replace('_', '-')}", a.tier, p.holds, {"objective": key})
            if p.holds:
                burns = {n: ev for n, w in sorted(nodes.items()) if (ev := w.events(key, now - a.long_s, now)).total}
                rates = {n: burn_rate(ev, budget) for n, ev in burns.items()}
                ranked = sorted(burns, key=lambda n: (-rates[n], n))
                worst = rates[ranked[0]] if ranked else 0.0
                each = ", ".join(f"{n} {rates[n]:.3g}x ({burns[n].bad:,} of {burns[n].total:,} bad)"
                                 for n in ranked[:NODES_SAID])
                more = f" and {len(ranked) - NODES_SAID} more" if len(ranked) > NODES_SAID else ""
                note = f"{len(ranked)} node(s) served it over the last {_window(a.long_s)}: {each}{more}"
                v.labels = {"worst_node": ranked[0]} if ranked else {}
                v.evidence = {"values": {"burn_long": round(lb, 4), "burn_short": round(sb, 4),
                                         "factor": a.factor, "budget": budget,
                                         "budget_remaining": round(left, 6),
                                         "budget_left_pct": round(100 * max(left, 0.0), 4),
                                         "exhaust_h": round(max(left, 0.0) * window / lb / HOUR_S, 4),
                                         "short_min": a.short_s / MINUTE_S, "slo_window_d": window / 86400,
                                         "bad_long": float(long_ev.bad), "events_long": float(long_ev.total),
                                         "undecided_long": float(long_ev.undecided),
                                         "nodes": float(len(ranked)), "worst_burn": round(worst, 4)},
                              "window_s": a.long_s, "count": long_ev.bad,
                              "note": note + (f"; {notes[key]}" if notes.get(key) else "")}
            out.append(v)
    return out


def over_target(win: ServiceWindow, slo: ServiceSlo, now: float, nodes: Mapping[str, ServiceWindow]) -> list[Verdict]:
    """Each objective whose events over the last ``OVER_S`` miss it more often than its budget
    allows (≥ ``MIN_EVENTS`` of them), whatever its burn rate over the pairs' windows."""
    out = []
    for key, budget in slo.budgets().items():
        ev = win.events(key, now - OVER_S, now)
        holds = ev.total >= MIN_EVENTS and ev.bad > budget * ev.total
        v = Verdict("slo-over-target", Tier.ATTENTION, holds, {"objective": key}, keep_s=OVER_S)
        if holds:
            served = sum(1 for w in nodes.values() if w.events(key, now - OVER_S, now).total)
            v.evidence = {"values": {"bad": float(ev.bad), "events": float(ev.total),
                                     "bad_pct": round(100 * ev.bad / ev.total, 4), "allowed_pct": round(100 * budget, 4),
                                     "burn": round(burn_rate(ev, budget), 4), "nodes": float(served)},
                          "window_s": OVER_S, "count": ev.bad}
        out.append(v)
    return out


def step_verdict(slots: dict[str, AlertSlot], fp: str, v: Verdict, now: float,
                 labels: Mapping[str, str]) -> AlertTransition | None:
    """Step ``v``'s alert slot (kept in ``slots`` while pending or firing); at firing its labels
    (``labels`` and the verdict's own), evidence, and the rule's text filled from them."""
    slot = slots.get(fp)
    if slot is None:
        if not v.holds:
            return None
        slot = slots[fp] = AlertSlot(v.rule)
    started = slot.firing_since
    change = step(slot, now, v.holds, v.for_s, v.keep_s)
    out = None
    if change == "firing":
        slot.labels = {**labels, **v.identity, **v.labels}
        slot.evidence = {"values": {}, **v.evidence, "held_for_s": round(now - (slot.pending_since or now), 3)}
        names = template_names(slot.labels, slot.evidence)
        text = TEXT[v.rule]
        slot.summary, slot.action, slot.tier = fill(text.summary, names), fill(text.action, names), v.tier.value
        out = transition(v.rule, fp, slot, "firing", now, now)
    elif change == "resolved":
        out = transition(v.rule, fp, slot, "resolved", now, started or now)
    if slot.firing_since is None and slot.pending_since is None:
        del slots[fp]
    return out


# --------------------------------------------------------------------------- composite rules


def _mean(win: ServiceWindow, name: str, since: float, until: float) -> tuple[Quantile | None, float | None, int]:
    b, total = win.buckets(name, since, until)
    if b is None:
        return None, None, 0
    return quantile(b, 0.99), total / b.total, b.total


def tail_verdicts(win: ServiceWindow, now: float) -> list[Verdict]:
    """The pitfall "the average hides the tail": p99 in a wholly higher bucket than the hour
    before, and at least doubled (interpolated), while the mean stays within ±20 %."""
    out = []
    for name in TAIL_METRICS:
        cur, cur_mean, n = _mean(win, name, now - TAIL_NOW_S, now)
        ref, ref_mean, m = _mean(win, name, now - TAIL_NOW_S - TAIL_REF_S, now - TAIL_NOW_S)
        holds = bool(cur and ref and cur_mean is not None and ref_mean and n >= MIN_TAIL_OBS and m >= MIN_TAIL_OBS
                     and cur.lower >= ref.upper and cur.estimate is not None and ref.estimate
                     and cur.estimate >= TAIL_RATIO * ref.estimate
                     and abs(cur_mean / ref_mean - 1) <= MEAN_FLAT)
        v = Verdict("inference-tail-rising", Tier.ATTENTION, holds, {"metric": name}, for_s=TAIL_FOR_S,
                    keep_s=300.0)
        if holds:
            assert cur and ref and cur_mean is not None and ref_mean
            v.evidence = {"values": {"p99_upper": cur.upper, "p99_lower": cur.lower, "p99_ref_upper": ref.upper,
                                     "p99_ref_lower": ref.lower,
                                     "p99_interpolated": round(cur.estimate or 0.0, 4),
                                     "p99_ref_interpolated": round(ref.estimate or 0.0, 4),
                                     "mean_s": round(cur_mean, 4), "mean_ref_s": round(ref_mean, 4)},
                          "window_s": TAIL_NOW_S, "count": n,
                          "note": f"{cur.statement()} over the last 5 min; {ref.statement()} in the hour before: "
                                  "the bounds are what the buckets know, interpolated figures are estimates"}
        out.append(v)
    return out


def kv_knee(win: ServiceWindow, now: float) -> Verdict:
    """The capacity knee: KV cache nearly full and the waiting queue growing (or at least not
    draining: above 80 % of the 5 min before)."""
    kv = win.gauge_mean("kv_cache_usage", now - KNEE_S, now)
    waiting = win.gauge_mean("requests_waiting", now - KNEE_S, now)
    before = win.gauge_mean("requests_waiting", now - 2 * KNEE_S, now - KNEE_S)
    holds = bool(kv is not None and waiting is not None and kv >= KV_SATURATED and waiting >= 1
                 and waiting >= QUEUE_DRAINING * (before or 0.0))
    v = Verdict("inference-kv-knee", Tier.ATTENTION, holds, for_s=300.0, keep_s=300.0)
    if holds:
        assert kv is not None and waiting is not None
        running = win.gauge_mean("requests_running", now - KNEE_S, now)
        v.evidence = {"values": {"kv_cache_usage": round(kv, 4), "kv_pct": round(100 * kv, 3),
                                 "requests_waiting": round(waiting, 3),
                                 "requests_waiting_before": round(before or 0.0, 3),
                                 "requests_running": round(running or 0.0, 3)}, "window_s": KNEE_S}
    return v


def preemptions(win: ServiceWindow, now: float) -> Verdict:
    """Preemptions (KV cache reclaimed from running requests) at twice the hour before's rate."""
    recent = win.counter("preemptions", now - PREEMPT_NOW_S, now)
    ref = win.counter("preemptions", now - PREEMPT_NOW_S - HOUR_S, now - PREEMPT_NOW_S)
    rate, ref_rate = recent / PREEMPT_NOW_S * 60, ref / HOUR_S * 60
    holds = recent >= PREEMPT_MIN and rate > 2 * ref_rate
    v = Verdict("inference-preemptions", Tier.ATTENTION, holds, keep_s=600.0)
    if holds:
        v.evidence = {"values": {"preemptions": recent, "per_min": round(rate, 4), "per_min_ref": round(ref_rate, 4)},
                      "window_s": PREEMPT_NOW_S, "count": int(recent)}
    return v


def failures(win: ServiceWindow, now: float) -> Verdict:
    """A burst of failed requests (vLLM: aborted), whatever the SLO says."""
    failed = win.counter("requests_failed", now - FAIL_S, now)
    total = failed + win.counter("requests", now - FAIL_S, now)
    holds = failed >= FAIL_MIN and failed / total >= FAIL_SHARE
    v = Verdict("inference-failures", Tier.ATTENTION, holds, keep_s=300.0)
    if holds:
        v.evidence = {"values": {"failed": failed, "finished": total, "share": round(failed / total, 4),
                                 "share_pct": round(100 * failed / total, 3)},
                      "window_s": FAIL_S, "count": int(failed)}
    return v


def batch_full(win: ServiceWindow, now: float, max_batch: int | None) -> Verdict:
    """The real batch (running requests) at its configured maximum with requests waiting."""
    running = win.gauge_mean("requests_running", now - KNEE_S, now)
    waiting = win.gauge_mean("requests_waiting", now - KNEE_S, now)
    holds = bool(max_batch and running is not None and waiting is not None
                 and running >= BATCH_FULL * max_batch and waiting >= 1)
    v = Verdict("inference-batch-full", Tier.ATTENTION, holds, for_s=300.0, keep_s=300.0)
    if holds:
        assert max_batch and running is not None and waiting is not None
        v.evidence = {"values": {"requests_running": round(running, 3), "max_batch": float(max_batch),
                                 "fill_pct": round(100 * running / max_batch, 3),
                                 "requests_waiting": round(waiting, 3)}, "window_s": KNEE_S}
    return v


def restart_verdicts(win: ServiceWindow, now: float, restart: Restart | None) -> list[Verdict]:
    """A new process of the service (info), and for 6 h after it its TTFT p90 against the hour
    before it (attention when wholly a bucket higher and 1.5× interpolated)."""
    fresh = restart is not None and now - restart.at <= 600.0
    new = Verdict("inference-restarted", Tier.INFO, fresh)
    if fresh:
        assert restart is not None
        new.evidence = {"values": {"restart_ts": restart.at}, "note": restart.why}
    reg = Verdict("inference-ttft-regression", Tier.ATTENTION, False, for_s=300.0)
    if restart is not None and restart.counts is not None and now - restart.at <= RESTART_JUDGED_S:
        cur_b, _ = win.buckets("ttft", max(restart.at, now - RESTART_NOW_S), now)
        base = quantile(Buckets(restart.bounds or (), restart.counts), RESTART_Q)
        cur = quantile(cur_b, RESTART_Q) if cur_b and cur_b.bounds == restart.bounds else None
        reg.holds = bool(cur and base and cur_b and cur_b.total >= MIN_RESTART_OBS and cur.lower >= base.upper
                         and cur.estimate and base.estimate and cur.estimate >= RESTART_RATIO * base.estimate)
        if reg.holds:
            assert cur and base and cur_b
            reg.evidence = {"values": {"p90_upper": cur.upper, "p90_lower": cur.lower, "p90_before_upper": base.upper,
                                       "p90_before_lower": base.lower,
                                       "p90_interpolated": round(cur.estimate or 0.0, 4),
                                       "p90_before_interpolated": round(base.estimate or 0.0, 4),
                                       "restart_ts": restart.at},
                            "count": cur_b.total,
                            "note": f"{restart.why}; {cur.statement()} since, {base.statement()} in the hour "
                                    f"before; judged for {_window(RESTART_JUDGED_S)} after the new process, then it "
                                    "is its own baseline"}
    return [new, reg]
