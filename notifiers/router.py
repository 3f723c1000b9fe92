"""Routing policy: who hears about which alert, and when. Pure and deterministic.

Alertmanager's model where it is right: a routing tree (matchers, ``continue``,
inherited ``group_by``/``group_wait``/``group_interval``/``repeat_interval``),
aggregation groups flushed on a fixed cadence, inhibition and silences. What
users miss there is added: acknowledgements (stop repeats and escalation),
escalation of unacknowledged critical alerts through levels with an on-call
rotation that decides who is paged and @-mentioned, an ``ack`` notification to
the receivers paged for an acknowledged alert (PagerDuty: ``acknowledge``),
owner routing by the alert's user/project, and dedup of at-least-once input.
The whole state survives a restart: :meth:`Router.dump` / :meth:`Router.load`.

Time is always an argument (``now``): event time in simulation and replay,
wall time live, so replay sends the same notifications at the same times.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from dataclasses import dataclass, field
from typing import NamedTuple

from gpuwarden.contract import AlertState, AlertTransition, ContractError, Matcher, Tier, decode, encode, is_simulated
from gpuwarden.notifiers.config import GROUP_BY_ALL, ONCALL, NotifyConfig, RouteConfig
from gpuwarden.notifiers.control import ControlState
from gpuwarden.notifiers.matchers import alert_labels, matches_all
from gpuwarden.notifiers.message import Notification, Reason
from gpuwarden.notifiers.oncall import on_call

#: How long a resolved alert's dedup entry is kept (event time) against late redeliveries.
DEDUP_KEEP_S = 86400.0
STATE_VERSION = 1


@dataclass(slots=True)
class Route:
    """A routing-tree node with its inherited options filled in."""

    id: str
    matchers: list[Matcher]
    receivers: list[str]
    group_by: list[str]
    group_wait: float
    group_interval: float
    repeat_interval: float
    mention_oncall: bool
    cont: bool
    children: list[Route]


def build_tree(cfg: RouteConfig, parent: Route | None = None, rid: str = "0") -> Route:
    """Resolve inheritance once, so matching is a plain walk."""
    def pick(name: str, fallback: object) -> object:
        own = getattr(cfg, name)
        return own if own is not None else (getattr(parent, name) if parent else fallback)

    node = Route(
        id=rid, matchers=list(cfg.matchers),
        receivers=list(pick("receivers", [])),  # type: ignore[arg-type]
        group_by=list(pick("group_by", [])),  # type: ignore[arg-type]
        group_wait=float(pick("group_wait", 30.0)),  # type: ignore[arg-type]
        group_interval=float(pick("group_interval", 300.0)),  # type: ignore[arg-type]
        repeat_interval=float(pick("repeat_interval", 4 * 3600.0)),  # type: ignore[arg-type]
        mention_oncall=bool(pick("mention_oncall", False)),
        cont=cfg.continue_, children=[],
    )
    node.children = [build_tree(c, node, f"{rid}.{i}") for i, c in enumerate(cfg.routes)]
    return node


def match_routes(route: Route, labels: dict[str, str]) -> list[Route]:
    """The routes an alert lands on: deepest matching children, ``continue`` going on to siblings."""
    if not matches_all(route.matchers, labels):
        return []
    out: list[Route] = []
    for child in route.children:
        hit = match_routes(child, labels)
        out += hit
        if hit and not child.cont:
            break
    return out or [route]


@dataclass(slots=True)
class Group:
    """An aggregation group: one route, one receiver, one set of group_by values."""

    key: str
    receiver: str
    route: Route
    mention: bool
    next_flush: float
    alerts: dict[str, AlertTransition] = field(default_factory=dict)
    sent_firing: set[str] = field(default_factory=set)
    last_sent: float | None = None
    changed: set[str] = field(default_factory=set)
    """Alerts sent firing whose episode was updated since (a new likely cause): sent again, as an update."""


@dataclass(slots=True)
class Page:
    """Escalation track of one critical alert episode."""

    alert: AlertTransition
    paged_at: float
    level: int = 0
    held: bool = False
    """Due but silenced or inhibited: rechecked on every tick, no deadline of its own."""
    receivers: set[str] = field(default_factory=set)
    """Who was sent this episode (group flushes and escalation levels): they hear of the ack."""


class Seen(NamedTuple):
    """The newest transition of an alert the router has taken. A tuple, so a later one compares
    greater: an episode (``started_at``) firing (``rank`` 0) before it resolves (1), updates of one
    state by ``ts``."""

    started_at: float
    rank: int
    ts: float


class Router:
    """``on_transition`` and ``tick`` return the notifications due now; nothing else happens here."""

    def __init__(self, config: NotifyConfig, control: ControlState | None = None) -> None:
        self.config = config
        self.control = control or ControlState()
        self.tree = build_tree(config.routing_tree())
        self.groups: dict[str, Group] = {}
        self._due: list[tuple[float, str]] = []
        """Heap of (next_flush, group key): ticks touch only the groups that are due."""
        self.pages: dict[str, Page] = {}
        self._last: dict[str, Seen] = {}
        """fingerprint → the newest transition seen."""
        self._sources: list[dict[str, dict[str, str]]] = [{} for _ in config.inhibit_rules]
        self._purged_at = float("-inf")
        self._take_simulated = {r.name for r in config.receivers if r.accept_simulated}

    # ------------------------------------------------------------------ input

    def on_transition(self, t: AlertTransition, now: float) -> list[Notification]:
        if not self._is_new(t):
            return []
        labels = alert_labels(t)
        firing = t.state == AlertState.FIRING
        for rule, sources in zip(self.config.inhibit_rules, self._sources):
            if firing and matches_all(rule.source_matchers, labels):
                sources[t.fingerprint] = labels
            else:
                sources.pop(t.fingerprint, None)
        if t.tier == Tier.INFO:
            return []  # recorded only (the pipeline keeps history)
        closes: list[Notification] = []
        if t.tier == Tier.CRITICAL and self.config.escalation:
            if firing:
                p = self.pages.setdefault(t.fingerprint, Page(t, now))
                if p.alert.started_at == t.started_at:
                    p.alert = t  # an update: escalation tells its words, never pages anew
            elif (p := self.pages.pop(t.fingerprint, None)) is not None:
                closes = self._close_escalations(p, t, now)
        for route in match_routes(self.tree, labels):
            self._add(route, t, labels, now)
        return closes + self._flush_due(now)

    def tick(self, now: float) -> list[Notification]:
        out = self._flush_due(now) + self._escalate(now)
        if now - self._purged_at >= 3600:
            self._purged_at = now
            self._last = {fp: v for fp, v in self._last.items() if v.rank == 0 or v.ts >= now - DEDUP_KEEP_S}
        return out

    def dump(self) -> bytes:
        """The whole state as deterministic JSON (same state, same bytes), for :meth:`load` after a restart."""
        state = {
            "version": STATE_VERSION,
            "groups": [{"key": g.key, "receiver": g.receiver, "route": g.route.id, "mention": g.mention,
                        "next_flush": g.next_flush, "last_sent": g.last_sent,
                        "alerts": [_alert_json(g.alerts[fp]) for fp in sorted(g.alerts)],
                        "sent_firing": sorted(g.sent_firing), "changed": sorted(g.changed)}
                       for _, g in sorted(self.groups.items())],
            "pages": [{"alert": _alert_json(p.alert), "paged_at": p.paged_at, "level": p.level, "held": p.held,
                       "receivers": sorted(p.receivers)} for _, p in sorted(self.pages.items())],
            "last": [[fp, *v] for fp, v in sorted(self._last.items())],
            "sources": [dict(sorted(src.items())) for src in self._sources],
            "purged_at": None if self._purged_at == float("-inf") else self._purged_at,
        }
        return json.dumps(state, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()

    def load(self, data: bytes) -> list[str]:
        """Replace the state with a :meth:`dump`; returns a line per group whose route no longer exists.

        Raises ValueError (state unchanged) on anything that is not a dump of this version.
        """
        try:
            st = json.loads(data)
            if not isinstance(st, dict) or st.get("version") != STATE_VERSION:
                raise ValueError(f"expected router state version {STATE_VERSION}")
            routes = _routes_by_id(self.tree)
            groups: dict[str, Group] = {}
            dropped: list[str] = []
            for g in st["groups"]:
                if g["route"] not in routes:
                    dropped.append(f"group {g['key']}: route {g['route']} is not in the routing tree now")
                    continue
                groups[g["key"]] = Group(g["key"], g["receiver"], routes[g["route"]], g["mention"], g["next_flush"],
                                         {a.fingerprint: a for a in map(_alert, g["alerts"])},
                                         set(g["sent_firing"]), g["last_sent"], set(g.get("changed", ())))
            pages = {p["alert"]["fingerprint"]: Page(_alert(p["alert"]), p["paged_at"], p["level"], p["held"],
                                                     set(p["receivers"])) for p in st["pages"]}
            last = {fp: Seen(started, rank, ts) for fp, started, rank, ts in st["last"]}
            sources = [dict(src) for src in st["sources"]]
            if len(sources) != len(self.config.inhibit_rules):  # the rules changed: sources are rebuilt as alerts come
                sources = [{} for _ in self.config.inhibit_rules]
            purged = st["purged_at"]
        except (KeyError, TypeError, ValueError, ContractError) as e:
            raise ValueError(f"router state not readable: {e}") from None
        self.groups, self.pages, self._last, self._sources = groups, pages, last, sources
        self._purged_at = float("-inf") if purged is None else purged
        self._due = [(g.next_flush, k) for k, g in groups.items()]
        heapq.heapify(self._due)
        return dropped

    def next_deadline(self) -> float | None:
        """When ``tick`` next has something to do (None: nothing pending)."""
        times = [self._due[0][0]] if self._due else []
        levels = self.config.escalation
        times += [p.paged_at + levels[p.level + 1].after for p in self.pages.values()
                  if p.level + 1 < len(levels) and not p.held]
        return min(times, default=None)

    # ------------------------------------------------------------------ policy pieces

    def _is_new(self, t: AlertTransition) -> bool:
        """At-least-once input: an episode moves firing → resolved once, its firing updated on the
        way (same ``started_at``, a later ``ts``: a new likely cause); anything else is a repeat."""
        seen = Seen(t.started_at, 0 if t.state == AlertState.FIRING else 1, t.ts)
        last = self._last.get(t.fingerprint)
        if last is not None and seen <= last:
            return False
        self._last[t.fingerprint] = seen
        return True

    def _add(self, route: Route, t: AlertTransition, labels: dict[str, str], now: float) -> None:
        gl = json.dumps(group_labels(route, labels), sort_keys=True, separators=(",", ":"))
        for token in route.receivers:
            for receiver in self.config.resolve(token, labels):
                if not self._takes(receiver, t):
                    continue
                key = f"{route.id}/{receiver}/{gl}"
                g = self.groups.get(key)
                if g is None:
                    g = self.groups[key] = Group(key, receiver, route, route.mention_oncall or token == ONCALL,
                                                 now + route.group_wait)
                    heapq.heappush(self._due, (g.next_flush, key))
                if t.state == AlertState.FIRING and t.fingerprint in g.sent_firing:
                    g.changed.add(t.fingerprint)
                g.alerts[t.fingerprint] = t

    def _takes(self, receiver: str, t: AlertTransition) -> bool:
        """Simulated alerts go only to receivers that opted in (``accept_simulated``): a demo, or an
        agent left on ``source: simulate``, must never page anyone (issue #18, defect 6)."""
        return receiver in self._take_simulated or not is_simulated(t.labels)

    def _muted(self, t: AlertTransition, now: float) -> bool:
        """Silenced, or inhibited by another firing alert (an alert never inhibits itself)."""
        if self.control.silenced_by(t, now) is not None:
            return True
        labels = alert_labels(t)
        for rule, sources in zip(self.config.inhibit_rules, self._sources):
            if not sources or not matches_all(rule.target_matchers, labels):
                continue
            if matches_all(rule.source_matchers, labels):
                continue
            for fp, src in sources.items():
                if fp != t.fingerprint and all(src.get(e, "") == labels.get(e, "") for e in rule.equal):
                    return True
        return False

    def _oncall_now(self, level: int, now: float) -> list[str]:
        levels = self.config.escalation
        if level >= len(levels) or levels[level].schedule is None:
            return []
        name = levels[level].schedule
        assert name is not None
        return [on_call(self.config.schedules[name], now, self.control.covers(name))]

    # ------------------------------------------------------------------ timers

    def _flush_due(self, now: float) -> list[Notification]:
        due: list[Group] = []
        while self._due and self._due[0][0] <= now:
            at, key = heapq.heappop(self._due)
            g = self.groups.get(key)
            if g is not None and g.next_flush == at:  # else a stale entry of a rescheduled/gone group
                due.append(g)
        out: list[Notification] = []
        for g in due:
            n = self._flush(g, now)
            if n is not None:
                out.append(n)
            interval = g.route.group_interval
            while g.next_flush <= now:
                g.next_flush += interval
            if g.alerts:
                heapq.heappush(self._due, (g.next_flush, g.key))
            else:
                del self.groups[g.key]
        return out

    def _flush(self, g: Group, now: float) -> Notification | None:
        firing = [a for a in g.alerts.values() if a.state == AlertState.FIRING and not self._muted(a, now)]
        # Muting stops new notifications, never the close of one already sent: a resolve always goes out.
        resolved = [a for a in g.alerts.values() if a.state == AlertState.RESOLVED and a.fingerprint in g.sent_firing]
        new = [a for a in firing if a.fingerprint not in g.sent_firing or a.fingerprint in g.changed]
        g.changed.clear()
        for fp in [fp for fp, a in g.alerts.items() if a.state == AlertState.RESOLVED]:
            del g.alerts[fp]
            g.sent_firing.discard(fp)
        reason: Reason
        if new:
            reason = "update" if g.last_sent is not None else "new"
            alerts = firing + resolved
        elif resolved:
            reason, alerts = "resolved", firing + resolved
        else:
            unacked = [a for a in firing if self.control.ack(a) is None]
            if not unacked or g.last_sent is None or now < g.last_sent + g.route.repeat_interval:
                return None
            reason, alerts = "repeat", unacked
        g.sent_firing.update(a.fingerprint for a in new)
        for a in new:
            if (p := self.pages.get(a.fingerprint)) is not None and p.alert.started_at == a.started_at:
                p.receivers.add(g.receiver)
        g.last_sent = now
        mentions = self._oncall_now(0, now) if g.mention and firing else []
        return _notification(g.receiver, g.key, alerts, reason, now, mentions, 0)

    def _close_escalations(self, p: Page, t: AlertTransition, now: float) -> list[Notification]:
        """The resolve for receivers paged only by escalation (no group of theirs holds the alert)."""
        in_groups = {g.receiver for g in self.groups.values() if t.fingerprint in g.sent_firing}
        return [_notification(r, f"escalation/{t.fingerprint}", [t], "resolved", now, [], p.level)
                for r in sorted(p.receivers - in_groups)]

    def _escalate(self, now: float) -> list[Notification]:
        levels = self.config.escalation
        out: list[Notification] = []
        for fp in sorted(self.pages):
            p = self.pages[fp]
            if self.control.ack(p.alert) is not None:
                del self.pages[fp]  # acknowledged: this episode never escalates again; who was paged hears of it
                out += [_notification(r, f"ack/{fp}", [p.alert], "ack", now, [], p.level) for r in sorted(p.receivers)]
                continue
            p.held = False
            while p.level + 1 < len(levels) and now >= p.paged_at + levels[p.level + 1].after:
                if self._muted(p.alert, now):
                    p.held = True
                    break
                p.level += 1
                mentions = self._oncall_now(p.level, now)
                labels = alert_labels(p.alert)
                resolved = dict.fromkeys(r for token in levels[p.level].receivers
                                         for r in self.config.resolve(token, labels))
                paged = [r for r in resolved if self._takes(r, p.alert)]
                out += [_notification(r, f"escalation/{fp}", [p.alert], "escalation", now, mentions, p.level)
                        for r in paged]
                p.receivers.update(paged)
        return out


def group_labels(route: Route, labels: dict[str, str]) -> dict[str, str]:
    """The values an aggregation group on ``route`` is keyed by (its ``group_by``)."""
    if route.group_by == [GROUP_BY_ALL]:
        return {k: v for k, v in labels.items() if k != "tier"}
    return {k: labels.get(k, "") for k in route.group_by}


def alert_groups(config: NotifyConfig, alerts: list[AlertTransition]) -> list[tuple[dict[str, str], list[AlertTransition]]]:
    """Firing alerts grouped as the router groups them (route, then ``group_by`` values), receivers
    aside: a console shows the groups even where no receiver is configured to be sent them."""
    tree = build_tree(config.routing_tree())
    groups: dict[tuple[str, str], tuple[dict[str, str], list[AlertTransition]]] = {}
    for t in alerts:
        labels = alert_labels(t)
        for route in match_routes(tree, labels):
            glabels = group_labels(route, labels)
            key = (route.id, json.dumps(glabels, sort_keys=True))
            groups.setdefault(key, (glabels, []))[1].append(t)
    return [groups[k] for k in sorted(groups)]


def _notification(receiver: str, group_key: str, alerts: list[AlertTransition], reason: Reason,
                  now: float, mentions: list[str], level: int) -> Notification:
    alerts = sorted(alerts, key=lambda a: (a.state != AlertState.FIRING, a.started_at, a.fingerprint))
    ident = "|".join([receiver, group_key, reason, repr(now), str(level)]
                     + [f"{a.fingerprint}:{a.state.value}:{a.started_at!r}" for a in alerts])
    nid = hashlib.sha256(ident.encode()).hexdigest()[:24]
    return Notification(receiver=receiver, group_key=group_key, alerts=alerts, reason=reason, at=now,
                        mentions=mentions, escalation_level=level, id=nid)


def firing_in_state(data: bytes) -> dict[str, AlertTransition]:
    """The alerts a :meth:`Router.dump` holds as firing (grouped or paged), by fingerprint; {} if unreadable."""
    try:
        st = json.loads(data)
        held = [a for g in st["groups"] for a in g["alerts"]] + [p["alert"] for p in st["pages"]]
        alerts = [_alert(a) for a in held]
    except (KeyError, TypeError, ValueError, ContractError):
        return {}
    return {a.fingerprint: a for a in alerts if a.state == AlertState.FIRING}


def _routes_by_id(route: Route) -> dict[str, Route]:
    out = {route.id: route}
    for child in route.children:
        out.update(_routes_by_id(child))
    return out


def _alert_json(a: AlertTransition) -> dict:
    return json.loads(encode(a))


def _alert(d: dict) -> AlertTransition:
    return decode(json.dumps(d), AlertTransition)
