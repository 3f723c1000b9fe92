"""Alertmanager's webhook (version 4) → gpuwarden alert transitions: pure, so the HTTP edge stays thin.

The payload is Alertmanager's ``notify/webhook`` ``Message``: ``template.Data``
(``receiver``, ``status``, ``alerts``, ``groupLabels``, ``commonLabels``,
``commonAnnotations``, ``externalURL``) plus ``version``, ``groupKey`` and
``truncatedAlerts``; each alert has ``status``, ``labels``, ``annotations``,
``startsAt``, ``endsAt``, ``generatorURL`` and ``fingerprint``. Each alert
becomes an :class:`AlertTransition`, so gpuwarden's router (dedup, grouping,
inhibition, silences, acks, escalation) and channels treat it like its own.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from gpuwarden.contract import AlertState, AlertTransition, Evidence, Tier, describe, field_path
from gpuwarden.notifiers.config import AlertmanagerWebhookConfig

#: Prefix of the fingerprints of alerts that came from Alertmanager: never equal to gpuwarden's own.
FINGERPRINT_PREFIX = "am-"
#: The annotation gpuwarden's ``alertmanager`` receiver sets: such an alert came from gpuwarden
#: and is not routed again (an Alertmanager routing it back would make a loop).
ORIGIN_ANNOTATION = "gpuwarden_fingerprint"
TEXT_CHARS = 4096  # the contract's Text limit


class PayloadError(ValueError):
    """Not an Alertmanager version-4 webhook payload; ``str()`` names the field at fault."""


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class AmAlert(_Lenient):
    status: Literal["firing", "resolved"]
    labels: dict[str, str] = Field(min_length=1)
    annotations: dict[str, str] = Field(default_factory=dict)
    starts_at: AwareDatetime = Field(alias="startsAt")
    ends_at: AwareDatetime | None = Field(default=None, alias="endsAt")
    generator_url: str = Field(default="", alias="generatorURL")
    fingerprint: str = ""


class AmMessage(_Lenient):
    version: Literal["4"]
    status: Literal["firing", "resolved"]
    receiver: str = ""
    group_key: str = Field(default="", alias="groupKey")
    truncated_alerts: int = Field(default=0, ge=0, alias="truncatedAlerts")
    """Alerts of the group Alertmanager left out (its ``max_alerts``): gpuwarden never sees them."""
    alerts: list[AmAlert]


def parse(body: bytes) -> AmMessage:
    """The webhook body, validated; :class:`PayloadError` says what is wrong, never echoing values."""
    try:
        return AmMessage.model_validate_json(body)
    except ValidationError as e:
        raise PayloadError(describe(e)[0]) from None


def _epoch(t: datetime | None) -> float | None:
    """Go's zero time (``0001-01-01T00:00:00Z``: "not set") is None."""
    if t is None or t.year <= 1:
        return None
    return t.timestamp()


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "…"


def fingerprint(a: AmAlert) -> str:
    """Alertmanager's own fingerprint, prefixed; a hash of the label set when the sender gave none."""
    if a.fingerprint:
        return FINGERPRINT_PREFIX + a.fingerprint
    canon = "\xff".join(f"{k}\xfe{v}" for k, v in sorted(a.labels.items()))
    return FINGERPRINT_PREFIX + hashlib.sha256(canon.encode()).hexdigest()[:16]


def tier(a: AmAlert, cfg: AlertmanagerWebhookConfig) -> Tier:
    return cfg.severity_tiers.get(a.labels.get("severity", "").lower(), cfg.default_tier)


def transition(a: AmAlert, cfg: AlertmanagerWebhookConfig) -> AlertTransition:
    """One Alertmanager alert as gpuwarden's record; its event time is startsAt, or endsAt once resolved."""
    started = _epoch(a.starts_at)
    if started is None:
        raise PayloadError("startsAt: expected a time (got Go's zero time)")
    ended = _epoch(a.ends_at) if a.status == "resolved" else None
    if a.status == "resolved" and ended is None:
        raise PayloadError("endsAt: expected the time a resolved alert ended")
    rule = a.labels.get("alertname") or "alertmanager"
    ann = a.annotations
    summary = ann.get("summary") or ann.get("description") or rule
    described = ann.get("description") if ann.get("summary") else None
    note = "; ".join(p for p in (described, a.generator_url) if p) or None
    return AlertTransition(
        fingerprint=fingerprint(a), rule=rule, tier=tier(a, cfg),
        state=AlertState.RESOLVED if ended is not None else AlertState.FIRING,
        labels={k: v for k, v in a.labels.items() if k != "alertname"},
        started_at=started, ended_at=ended, ts=ended if ended is not None else started,
        summary=_cut(summary), action=_cut(ann.get("runbook_url", "")),
        evidence=Evidence(note=_cut(note) if note else None),
    )


def transitions(msg: AmMessage, cfg: AlertmanagerWebhookConfig) -> list[AlertTransition]:
    """Every alert of ``msg`` except those gpuwarden sent Alertmanager itself; a bad one fails the whole
    payload (:class:`PayloadError` naming ``alerts[i]...``), so nothing is half-accepted."""
    out: list[AlertTransition] = []
    for i, a in enumerate(msg.alerts):
        if ORIGIN_ANNOTATION in a.annotations:
            continue
        try:
            out.append(transition(a, cfg))
        except ValidationError as e:  # a label or text over the contract's limits
            raise PayloadError("; ".join(f"{field_path(('alerts', i, *err['loc']))}: {err['msg']}"
                                         for err in e.errors(include_url=False, include_input=False))) from None
        except PayloadError as e:
            raise PayloadError(f"alerts[{i}].{e}") from None
    return out

