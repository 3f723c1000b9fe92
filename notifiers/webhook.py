"""Generic webhook with an Alertmanager-v4-compatible payload, so existing receivers work unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

from gpuwarden.contract import AlertState, AlertTransition
from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import WebhookConfig
from gpuwarden.notifiers.render import Locale, evidence_parts, is_resolved, words
from gpuwarden.notifiers.verdict import HttpRequest, authorization, json_request, reveal, status_verdict

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "not ended"


def rfc3339(t: float | None) -> str:
    """Epoch seconds as Go's ``time.Time`` JSON (UTC, ``Z``); None is Go's zero time."""
    return ZERO_TIME if t is None else datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def am_labels(a: AlertTransition) -> dict[str, str]:
    return {"alertname": a.rule, "severity": a.tier.value, **a.labels}


def am_annotations(a: AlertTransition, locale: Locale) -> dict[str, str]:
    """summary, action and the evidence in words: what Alertmanager's templates show."""
    annotations = {"summary": a.summary}
    if a.action:
        annotations["action"] = a.action
    if ev := evidence_parts(a.evidence, words(locale.language), locale.language):
        annotations["evidence"] = "; ".join(ev)
    return annotations


def am_alert(a: AlertTransition, locale: Locale) -> dict:
    return {
        "status": a.state.value,
        "labels": am_labels(a),
        "annotations": am_annotations(a, locale),
        "startsAt": rfc3339(a.started_at),
        "endsAt": rfc3339(a.ended_at if a.state == AlertState.RESOLVED else None),
        "generatorURL": "",
        "fingerprint": a.fingerprint,
    }


def _common(dicts: list[dict[str, str]]) -> dict[str, str]:
    if not dicts:
        return {}
    return {k: v for k, v in dicts[0].items() if all(d.get(k) == v for d in dicts[1:])}


def payload(cfg: WebhookConfig, n: Notification, locale: Locale) -> dict:
    alerts = [am_alert(a, locale) for a in n.alerts]
    kept = alerts[: cfg.max_alerts] if cfg.max_alerts else alerts
    common = _common([a["labels"] for a in alerts])
    return {
        "version": "4",
        "groupKey": n.group_key,
        "truncatedAlerts": len(alerts) - len(kept),
        "status": "resolved" if is_resolved(n) else "firing",
        "receiver": n.receiver,
        "groupLabels": common,
        "commonLabels": common,
        "commonAnnotations": _common([a["annotations"] for a in alerts]),
        "externalURL": cfg.external_url,
        "notification_reason": n.reason,
        "alerts": kept,
    }


def build_request(cfg: WebhookConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    auth = authorization(cfg.bearer_token)
    return json_request(reveal(cfg.url), payload(cfg, n, locale), {"Authorization": auth} if auth else {})


CHANNEL = HttpChannel(build_request, status_verdict, limits=(), text_limit=1_000_000)  # no platform limit
