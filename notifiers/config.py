"""The notifier's config section (``notify:``): receivers, routing tree, owners, on-call, escalation.

When ``route`` is left out, :func:`default_route` builds the tier policy:
info is recorded only; attention goes to the owner's chat, grouped; critical
pages the on-call AND posts to the team chat at once (no group_wait).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from gpuwarden.config import KafkaConfig, LimitsConfig, MetricsEndpoint, SecretRef, Section, SpoolConfig
from gpuwarden.contract import Matcher, Tier
from gpuwarden.units import Duration, Size
from gpuwarden.notifiers.markup import slack_id_kind
from gpuwarden.notifiers.receivers import BasicAuth, Receiver, fallback_problems

_MATCHER = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(=~|!~|!=|=)\s*(.*?)\s*$")

#: Receiver tokens resolved per alert: the owner's chat, the on-call pager, the team chat.
OWNER, ONCALL, TEAM = "@owner", "@oncall", "@team"
#: ``group_by: ["..."]``: every alert is its own group (Alertmanager's spelling).
GROUP_BY_ALL = "..."


def parse_matcher(text: str) -> Matcher:
    """``node=gpu-07``, ``rule=~thermal.*``, ``tier!=info``, ``user!~bot.*`` → Matcher.

    Values may be quoted; regexes are checked here so a typo fails at load, not at match time.
    """
    m = _MATCHER.match(text)
    if not m:
        raise ValueError(f"expected a matcher such as node=gpu-07 or rule=~thermal.* (got {text!r})")
    label, op, value = m.groups()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        value = value[1:-1]
    if op in ("=~", "!~"):
        try:
            re.compile(value)
        except re.error as e:
            raise ValueError(f"expected a valid regular expression in {text!r} ({e})") from None
    return Matcher(label=label, op=op, value=value)  # type: ignore[arg-type]


def _matchers(v: Any) -> list[Matcher]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise ValueError("expected a list of matchers such as ['tier=critical', 'node=~gpu-0.*']")
    return [x if isinstance(x, Matcher) else parse_matcher(x) if isinstance(x, str)
            else Matcher.model_validate(x) for x in v]


class RouteConfig(Section):
    """One node of the routing tree; unset options are inherited from the parent."""

    matchers: list[Matcher] = Field(default_factory=list)
    receivers: list[str] | None = None
    """Receiver names, or ``@owner`` / ``@oncall`` / ``@team``; ``[]`` = record only."""
    group_by: list[str] | None = None
    group_wait: Duration | None = None
    group_interval: Duration | None = None
    repeat_interval: Duration | None = None
    mention_oncall: bool | None = None
    """@-mention whoever is on call (first escalation level's schedule) in this route's messages."""
    continue_: bool = Field(default=False, alias="continue")
    routes: list[RouteConfig] = Field(default_factory=list)

    @field_validator("matchers", mode="before")
    @classmethod
    def _parse_matchers(cls, v: Any) -> list[Matcher]:
        return _matchers(v)

    @model_validator(mode="before")
    @classmethod
    def _receiver_alias(cls, data: Any) -> Any:
        if isinstance(data, dict) and "receiver" in data:
            data = dict(data)
            one = data.pop("receiver")
            if "receivers" in data:
                raise ValueError("expected either 'receiver' or 'receivers', not both")
            data["receivers"] = [] if one is None else [one]
        return data

    @field_validator("group_interval")
    @classmethod
    def _positive_interval(cls, v: float | None) -> float | None:
        if v is not None and v <= 0:
            raise ValueError("expected a group_interval above 0 (e.g. 5m)")
        return v


class InhibitRule(Section):
    """Alertmanager's inhibition: a firing source mutes targets with equal ``equal`` labels."""

    source_matchers: list[Matcher] = Field(min_length=1)
    target_matchers: list[Matcher] = Field(min_length=1)
    equal: list[str] = Field(default_factory=list)

    @field_validator("source_matchers", "target_matchers", mode="before")
    @classmethod
    def _parse_matchers(cls, v: Any) -> list[Matcher]:
        return _matchers(v)


_LOST = "rule=~(gpu[_-]?lost|node[_-]?unreachable|xid[_-]?79).*"


def default_inhibit_rules() -> list[InhibitRule]:
    """A lost GPU or unreachable node mutes that node's per-GPU and per-task alerts."""
    return [InhibitRule(source_matchers=[_LOST], target_matchers=[t], equal=["node"])  # type: ignore[list-item]
            for t in ("gpu=~.+", "task=~.+")]


def _epoch(v: Any) -> float:
    if isinstance(v, datetime):
        return v.timestamp()
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    try:
        return datetime.fromisoformat(str(v)).timestamp()
    except ValueError:
        raise ValueError(f"expected an ISO 8601 time or epoch seconds (got {v!r})") from None


class OverrideConfig(Section):
    user: str
    starts_at: float
    ends_at: float

    @field_validator("starts_at", "ends_at", mode="before")
    @classmethod
    def _time(cls, v: Any) -> float:
        return _epoch(v)


class ScheduleConfig(Section):
    """A rotation: ``users`` take turns of one day or one week from ``start`` (the hand-off time)."""

    rotation: Literal["daily", "weekly"] = "weekly"
    start: float = 0.0
    users: list[str] = Field(min_length=1)
    overrides: list[OverrideConfig] = Field(default_factory=list)

    @field_validator("start", mode="before")
    @classmethod
    def _time(cls, v: Any) -> float:
        return _epoch(v)


class EscalationLevel(Section):
    """Level 0 is the first page (``@oncall``); level n pages ``after`` the first page if unacked."""

    after: Duration = 0.0
    receivers: list[str] = Field(min_length=1)
    schedule: str | None = None


class OwnersConfig(Section):
    """Who owns an alert's chat: by ``user`` label, else ``project``, else ``default``."""

    users: dict[str, str] = Field(default_factory=dict)
    projects: dict[str, str] = Field(default_factory=dict)
    default: str | None = None


def _severity_tiers() -> dict[str, Tier]:
    return {"critical": Tier.CRITICAL, "warning": Tier.ATTENTION, "info": Tier.INFO}


def is_loopback(host: str) -> bool:
    """``127.0.0.1``, ``::1``, ``localhost``: only this machine can connect."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listener_auth(bind: str, token: object, basic_auth: object, could: str) -> None:
    """A listener has one credential at most, and one at least off loopback (``could``: what anyone
    reaching the port could do without); ValueError otherwise."""
    if token is not None and basic_auth is not None:
        raise ValueError("expected either 'token' or 'basic_auth', not both")
    if not is_loopback(bind) and token is None and basic_auth is None:
        raise ValueError(f"expected 'token' or 'basic_auth' when bind is not a loopback address "
                         f"(got {bind!r}): anyone who reaches the port could {could}")


class AlertmanagerWebhookConfig(Section):
    """``gpuwarden notify`` serves Alertmanager's webhook (version 4) and routes its alerts like its own."""

    bind: str = "127.0.0.1"
    port: int = Field(default=9095, ge=0, le=65535)
    """0: any free port (the address is logged at start)."""
    token: SecretRef | None = None
    """Bearer token Alertmanager sends (its ``http_config.authorization.credentials_file``)."""
    basic_auth: BasicAuth | None = None
    max_body_bytes: Size = Field(default=1 << 20, ge=1024)
    """Larger requests are refused with 413 before they are read."""
    severity_tiers: dict[str, Tier] = Field(default_factory=_severity_tiers)
    """The ``severity`` label's value (case-insensitive) → gpuwarden's tier."""
    default_tier: Tier = Tier.ATTENTION
    """The tier of an alert without a ``severity`` label or with one not in ``severity_tiers``."""

    @field_validator("severity_tiers")
    @classmethod
    def _lower(cls, v: dict[str, Tier]) -> dict[str, Tier]:
        return {k.lower(): t for k, t in v.items()}

    @model_validator(mode="after")
    def _auth_off_loopback(self) -> AlertmanagerWebhookConfig:
        check_listener_auth(self.bind, self.token, self.basic_auth, "post alerts")
        return self


#: The default pack's rules that say a part is failing (not the application, not a slowdown).
HARDWARE_RULES = ("xid-hardware", "xid-repeated", "xid-node-repeated", "gpu-recovery-reset", "gpu-recovery-reboot",
                  "gpu-recovery-drain-p2p", "ecc-double-bit", "row-remap", "gpu-lost", "driver-error")


class RepeatOffenderConfig(Section):
    """``notify.repeat_offenders``."""

    enabled: bool = True
    window: Duration = Field(default=14 * 86400.0, gt=0, description="how far back hardware alerts count (event time)")
    at_least: int = Field(default=3, ge=2, description="hardware alerts of one GPU or node within the window")
    rules: list[str] = Field(default_factory=lambda: list(HARDWARE_RULES))


class NotifyConfig(MetricsEndpoint):
    language: Literal["en", "zh-CN"] | None = None
    timezone: str = "UTC"
    """IANA zone (``Asia/Shanghai``) the messages show times in; alerts themselves stay in epoch seconds."""
    control: Literal["spool", "kafka"] = "spool"
    """Where silences, acks and on-call overrides live (and where the CLI writes them)."""
    receivers: list[Receiver] = Field(default_factory=list)
    team: str | None = None
    """The team chat receiver (``@team``): critical alerts go here besides the pager."""
    owners: OwnersConfig = Field(default_factory=OwnersConfig)
    route: RouteConfig | None = None
    inhibit_rules: list[InhibitRule] = Field(default_factory=default_inhibit_rules)
    schedules: dict[str, ScheduleConfig] = Field(default_factory=dict)
    escalation: list[EscalationLevel] = Field(default_factory=list)
    consumer_group: str = "gpuwarden-notify"
    max_backlog: Duration = 3600.0
    """``gpuwarden notify`` skips alert records older than this (a fresh group reads history first)."""
    tick_interval: Duration = 1.0
    """How often the worker runs timers (group flushes, repeats, escalation, spool drain)."""
    alertmanager_webhook: AlertmanagerWebhookConfig | None = None
    """When set, ``gpuwarden notify`` also serves Alertmanager's webhook (docs/alertmanager.md)."""
    drain_on_exit: Duration = 30.0
    """Wall time ``gpuwarden run`` waits at its end for the receivers' queues to empty (a signal cuts
    it short); what is left stays in the spool and goes out at the next start."""
    repeat_offenders: RepeatOffenderConfig = Field(default_factory=RepeatOffenderConfig)
    """One "replace or inspect" attention per GPU or node whose hardware alerts recur (notifiers/repeat.py)."""

    @field_validator("timezone")
    @classmethod
    def _zone(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"expected an IANA time zone such as UTC or Asia/Shanghai (got {v!r})") from None
        return v

    @model_validator(mode="after")
    def _names(self) -> NotifyConfig:
        problems = fallback_problems(self.receivers)
        names = {r.name for r in self.receivers}
        refs = [("team", self.team), ("owners.default", self.owners.default)]
        refs += [(f"owners.users.{k}", v) for k, v in self.owners.users.items()]
        refs += [(f"owners.projects.{k}", v) for k, v in self.owners.projects.items()]
        for i, lvl in enumerate(self.escalation):
            refs += [(f"escalation[{i}].receivers[{j}]", r) for j, r in enumerate(lvl.receivers)]
            if lvl.schedule is not None and lvl.schedule not in self.schedules:
                problems.append(f"escalation[{i}].schedule: expected a schedule name (no schedule {lvl.schedule!r})")
        refs += _route_refs(self.route, "route")
        problems += _slack_mention_problems(self)
        for where, name in refs:
            if name is not None and not name.startswith("@") and name not in names:
                problems.append(f"{where}: expected a receiver name (no receiver {name!r})")
            elif name is not None and name.startswith("@") and name not in (OWNER, ONCALL, TEAM):
                problems.append(f"{where}: expected @owner, @oncall or @team (got {name!r})")
        problems += self._circles(refs)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _circles(self, refs: list[tuple[str, str | None]]) -> list[str]:
        """A token set only to tokens that lead back to it (``escalation[0]: ["@oncall"]``, ``team:
        "@owner"`` with no ``owners.default``) reaches no one: refused at load, where it is first
        used, rather than an alert routed to nobody. An unset token (no ``team``) is not a circle."""
        out, seen = [], set()
        for where, token in refs:
            if token in (OWNER, ONCALL, TEAM) and token not in seen:
                seen.add(token)
                values = self._token_values(token, None)
                if values and not self.resolve(token):
                    out.append(f"{where}: {token} leads back to itself through {', '.join(values)} "
                               "and reaches no receiver (expected a receiver name somewhere on the way)")
        return out

    def routing_tree(self) -> RouteConfig:
        return self.route if self.route is not None else default_route()

    def resolve(self, token: str, labels: Mapping[str, str] | None = None) -> list[str]:
        """The receiver names ``token`` stands for: for the alert with ``labels`` (the router), or for
        any alert (None: what :meth:`reach` asks). A name stands for itself. ``team``, ``owners`` and the
        escalation levels' receivers may hold tokens too (the load check allows them), resolved in turn
        so an ``@oncall`` reaching ``[pager, "@team"]`` sends to the team chat; a token met again inside
        its own resolution stands for no one (``escalation[0]: ["@oncall"]``)."""
        return list(dict.fromkeys(self._resolve(token, labels, frozenset())))

    def _resolve(self, token: str, labels: Mapping[str, str] | None, outer: frozenset[str]) -> Iterator[str]:
        if token not in (OWNER, ONCALL, TEAM):
            yield token
        elif token not in outer:
            for value in self._token_values(token, labels):
                yield from self._resolve(value, labels, outer | {token})

    def _token_values(self, token: str, labels: Mapping[str, str] | None) -> list[str]:
        """What the config sets ``token`` to; ``@owner`` is the user's chat, else the project's, else
        ``owners.default``, else the team (any alert: every one of these that an alert can get)."""
        own = self.owners
        if token == TEAM:
            values = [self.team]
        elif token == ONCALL:
            values = list(self.escalation[0].receivers) if self.escalation else []
        elif labels is not None:
            values = [own.users.get(labels.get("user", "")) or own.projects.get(labels.get("project", ""))
                      or own.default or self.team]
        else:
            values = [*own.users.values(), *own.projects.values(), own.default or self.team]
        return [v for v in values if v]

    def reach(self, tokens: Iterable[str]) -> set[str]:
        """The receivers ``tokens`` may send to for any alert, fallbacks included: a route's for
        readiness (every one failing: not ready), the mentioning ones for the Slack on-call check. A
        name that is no receiver reaches nothing; the load check names it (:meth:`_names`)."""
        receivers = {r.name: r for r in self.receivers}
        out: set[str] = set()
        todo = [name for token in tokens for name in self.resolve(token)]
        while todo:
            if (name := todo.pop()) in receivers and name not in out:
                out.add(name)
                todo += receivers[name].fallback
        return out


def _route_refs(route: RouteConfig | None, where: str) -> list[tuple[str, str]]:
    if route is None:
        return []
    out = [(f"{where}.receivers[{i}]", r) for i, r in enumerate(route.receivers or [])]
    for i, child in enumerate(route.routes):
        out += _route_refs(child, f"{where}.routes[{i}]")
    return out


def _mentioning(cfg: NotifyConfig) -> dict[str, set[str]]:
    """Schedule name → the receivers whose messages may mention its on-call: level 0's through the routes
    with ``mention_oncall`` and every ``@oncall``, each level's through its receivers, and their fallbacks."""
    def mentioning(route: RouteConfig, receivers: list[str], mention: bool) -> list[str]:
        receivers = route.receivers if route.receivers is not None else receivers
        mention = route.mention_oncall if route.mention_oncall is not None else mention
        out = [t for t in receivers if mention or t == ONCALL]
        return out + [t for child in route.routes for t in mentioning(child, receivers, mention)]

    reach: dict[str, set[str]] = {}
    for i, level in enumerate(cfg.escalation):
        if level.schedule is not None:
            tokens = level.receivers + (mentioning(cfg.routing_tree(), [], False) if i == 0 else [])
            reach.setdefault(level.schedule, set()).update(cfg.reach(tokens))
    return reach


def _slack_mention_problems(cfg: NotifyConfig) -> list[str]:
    """A schedule whose on-call a Slack receiver mentions holds Slack ids: Slack mentions by id only."""
    slack = {r.name for r in cfg.receivers if r.kind == "slack"}
    problems: list[str] = []
    for name, receivers in sorted(_mentioning(cfg).items()):
        if name not in cfg.schedules or not (on_slack := sorted(receivers & slack)):
            continue  # an unknown schedule is named by the check of escalation[i].schedule
        s = cfg.schedules[name]
        users = [(f"users[{i}]", u) for i, u in enumerate(s.users)]
        users += [(f"overrides[{i}].user", o.user) for i, o in enumerate(s.overrides)]
        problems += [f"schedules.{name}.{where}: expected a Slack member id (U… or W…) or user-group id (S…), "
                     f"as receiver {on_slack[0]!r} (slack) mentions this schedule's on-call (got {user!r})"
                     for where, user in users if slack_id_kind(user) is None]
    return problems


def default_route() -> RouteConfig:
    """The tier policy as a tree: critical at once to pager + team chat; the rest to the owner, grouped."""
    return RouteConfig(
        receivers=[OWNER], group_by=["rule", "node"], group_wait=30.0, group_interval=300.0,
        repeat_interval=4 * 3600.0, mention_oncall=False,
        routes=[RouteConfig(matchers=["tier=critical"], receivers=[ONCALL, TEAM],  # type: ignore[list-item]
                            group_by=[GROUP_BY_ALL], group_wait=0.0, group_interval=60.0,
                            repeat_interval=3600.0, mention_oncall=True)],
    )


class NotifierSettings(Protocol):
    """What the notifier reads of the composed settings: its own section and the foundation's shared ones.

    The settings model is assembled from every room's section at load time; this names the part the
    notifier's commands and :class:`~gpuwarden.notifiers.pipeline.Notifier` depend on.
    """

    language: str
    notify: NotifyConfig
    kafka: KafkaConfig
    spool: SpoolConfig
    limits: LimitsConfig
