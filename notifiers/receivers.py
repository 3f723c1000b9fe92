"""Receiver config: where one named receiver delivers, and how.

Every credential is a :class:`SecretRef` (``{env: NAME}`` or ``{file: PATH}``),
webhook URLs included: a chat webhook URL carries its token, so it is a secret.
Base URLs that are not secrets (PagerDuty's endpoint, SMTP host) are plain and
overridable, so tests and air-gapped sites point them at local servers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from gpuwarden.config import SecretRef, Section
from gpuwarden.units import Duration

Name = str


class SlackConfig(Section):
    """Slack incoming webhook (``https://hooks.slack.com/services/T…/B…/…``)."""

    url: SecretRef
    send_resolved: bool = True


class FeishuConfig(Section):
    """Feishu/Lark custom bot; ``secret`` enables the signature check."""

    url: SecretRef
    secret: SecretRef | None = None
    at_user_ids: list[str] = Field(default_factory=list, description="open_ids to @ on attention/critical")
    at_all_on_critical: bool = False
    send_resolved: bool = True


class DingTalkConfig(Section):
    """DingTalk custom robot (``…/robot/send?access_token=…``); ``secret`` (``SEC…``) enables signing."""

    url: SecretRef
    secret: SecretRef | None = None
    msgtype: Literal["markdown", "actionCard"] = "markdown"
    at_mobiles: list[str] = Field(default_factory=list)
    at_user_ids: list[str] = Field(default_factory=list)
    at_all_on_critical: bool = False
    action_url: str | None = Field(default=None, description="actionCard button target (dashboard link)")
    send_resolved: bool = True

    @model_validator(mode="after")
    def _card_needs_link(self) -> DingTalkConfig:
        if self.msgtype == "actionCard" and not self.action_url:
            raise ValueError("expected 'action_url' when msgtype is actionCard (the card's button target)")
        return self


class WeComConfig(Section):
    """WeCom (企业微信) group robot (``…/cgi-bin/webhook/send?key=…``)."""

    url: SecretRef
    mention_user_ids: list[str] = Field(default_factory=list, description="userids to <@…> in markdown")
    send_resolved: bool = True


class PagerDutyConfig(Section):
    """PagerDuty Events API v2 integration."""

    routing_key: SecretRef
    url: str = "https://events.pagerduty.com/v2/enqueue"
    source: str = "gpuwarden"
    send_resolved: bool = True


class WebhookConfig(Section):
    """Generic webhook receiving an Alertmanager-v4-compatible payload."""

    url: SecretRef
    bearer_token: SecretRef | None = None
    max_alerts: int = Field(default=0, ge=0, description="0 = all alerts; else truncate, like Alertmanager")
    external_url: str = ""
    send_resolved: bool = True


class BasicAuth(Section):
    """HTTP basic auth; the password is a secret like every other."""

    username: str = Field(min_length=1)
    password: SecretRef


class AlertmanagerConfig(Section):
    """Prometheus Alertmanager's API: alerts are POSTed to ``<url>/api/v2/alerts`` (``PostableAlerts``)."""

    url: str = Field(pattern=r"^https?://", description="Alertmanager's base URL, e.g. http://alertmanager:9093")
    bearer_token: SecretRef | None = None
    basic_auth: BasicAuth | None = None
    firing_ttl: Duration = Field(default=5 * 3600.0, gt=0)
    """A firing alert's ``endsAt`` is sent this far ahead: Alertmanager resolves an alert by itself
    once ``endsAt`` passes, and gpuwarden re-sends a firing alert only at its route's repeat_interval
    (4 h by default), so keep this above the longest repeat_interval of the routes reaching it."""
    generator_url: str = ""
    """Sent as every alert's ``generatorURL`` (e.g. the gpuwarden dashboard); empty: left out."""
    send_resolved: bool = True

    @model_validator(mode="after")
    def _one_auth(self) -> AlertmanagerConfig:
        if self.bearer_token is not None and self.basic_auth is not None:
            raise ValueError("expected either 'bearer_token' or 'basic_auth', not both")
        return self


class EmailConfig(Section):
    """Email over SMTP."""

    to: list[str] = Field(min_length=1)
    sender: str = Field(alias="from")
    host: str = "127.0.0.1"
    port: int = Field(default=25, ge=1, le=65535)
    tls: Literal["none", "starttls", "ssl"] = "none"
    username: str | None = None
    password: SecretRef | None = None
    timeout_s: float = Field(default=10.0, gt=0)
    send_resolved: bool = False

    @model_validator(mode="after")
    def _auth_pair(self) -> EmailConfig:
        if (self.username is None) != (self.password is None):
            raise ValueError("expected both 'username' and 'password' for SMTP auth, or neither")
        return self


class AppriseConfig(Section):
    """Anything Apprise knows (``pip install gpuwarden[apprise]``); the URL holds credentials."""

    url: SecretRef
    rate_limit: int = Field(default=20, ge=1, description="sends per rate_window (conservative: unknown target)")
    rate_window: Duration = Field(default=60.0, gt=0)
    send_resolved: bool = True


ChannelConfig = (
    SlackConfig | FeishuConfig | DingTalkConfig | WeComConfig
    | PagerDutyConfig | WebhookConfig | AlertmanagerConfig | EmailConfig | AppriseConfig
)
CHANNELS = ("slack", "feishu", "dingtalk", "wecom", "pagerduty", "webhook", "alertmanager", "email", "apprise")


class Receiver(Section):
    """One named destination: exactly one channel section plus an optional fallback chain."""

    name: Name = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    slack: SlackConfig | None = None
    feishu: FeishuConfig | None = None
    dingtalk: DingTalkConfig | None = None
    wecom: WeComConfig | None = None
    pagerduty: PagerDutyConfig | None = None
    webhook: WebhookConfig | None = None
    alertmanager: AlertmanagerConfig | None = None
    email: EmailConfig | None = None
    apprise: AppriseConfig | None = None
    fallback: list[Name] = Field(default_factory=list)
    """Receiver names tried in order when this one fails permanently or stays down."""
    language: Literal["en", "zh-CN"] | None = None
    """Overrides the notifier's language for this receiver."""

    @model_validator(mode="after")
    def _one_channel(self) -> Receiver:
        present = [c for c in CHANNELS if getattr(self, c) is not None]
        if len(present) != 1:
            got = ", ".join(present) if present else "none"
            raise ValueError(f"expected exactly one channel section of {', '.join(CHANNELS)} (got {got})")
        if self.name in self.fallback:
            raise ValueError(f"expected 'fallback' not to name the receiver itself ({self.name})")
        return self

    @property
    def kind(self) -> str:
        """The channel name (``slack``, ``feishu``, …)."""
        return next(c for c in CHANNELS if getattr(self, c) is not None)

    @property
    def channel(self) -> ChannelConfig:
        return getattr(self, self.kind)


def fallback_problems(receivers: list[Receiver]) -> list[str]:
    """Unknown fallback names and duplicate receiver names, as ``receivers[i]...`` lines."""
    problems: list[str] = []
    names = [r.name for r in receivers]
    seen: set[str] = set()
    for i, r in enumerate(receivers):
        if r.name in seen:
            problems.append(f"receivers[{i}].name: expected a unique name ({r.name} is used twice)")
        seen.add(r.name)
        for j, f in enumerate(r.fallback):
            if f not in names:
                problems.append(f"receivers[{i}].fallback[{j}]: expected a receiver name (no receiver {f!r})")
    return problems
