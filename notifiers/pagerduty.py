"""PagerDuty Events API v2: trigger / acknowledge / resolve, one event per alert.

``dedup_key`` is the alert fingerprint, so PagerDuty's incident follows the
alert's life; severity comes from the tier.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpuwarden.contract import AlertState, AlertTransition, Tier
from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import PagerDutyConfig
from gpuwarden.notifiers.render import Locale, alert_block
from gpuwarden.notifiers.verdict import HttpRequest, json_request, reveal, status_verdict

SUMMARY_CHARS = 1024
SEVERITY = {Tier.CRITICAL: "critical", Tier.ATTENTION: "warning", Tier.INFO: "info"}


def event_action(n: Notification, a: AlertTransition) -> str:
    if a.state == AlertState.RESOLVED:
        return "resolve"
    return "acknowledge" if n.reason == "ack" else "trigger"


def event(cfg: PagerDutyConfig, n: Notification, a: AlertTransition, routing_key: str, locale: Locale) -> dict:
    action = event_action(n, a)
    ev: dict = {"routing_key": routing_key, "event_action": action, "dedup_key": a.fingerprint}
    if action != "trigger":
        return ev
    ev["payload"] = {
        "summary": a.summary[:SUMMARY_CHARS],
        "source": a.labels.get("node") or cfg.source,
        "severity": SEVERITY[a.tier],
        "timestamp": datetime.fromtimestamp(a.ts, UTC).isoformat(),
        "component": a.labels.get("gpu") or None,
        "group": a.labels.get("task") or a.labels.get("project") or None,
        "class": a.rule,
        "custom_details": {"labels": a.labels, "action": a.action, "details": alert_block(a, locale),
                           "mentions": n.mentions, "escalation_level": n.escalation_level},
    }
    ev["payload"] = {k: v for k, v in ev["payload"].items() if v is not None}
    ev["client"] = "gpuwarden"
    return ev


def build_request(cfg: PagerDutyConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    """One event for the notification's single alert (delivery splits groups: ``one_alert_per_request``)."""
    if len(n.alerts) != 1:
        raise ValueError(f"PagerDuty events carry one alert; got {len(n.alerts)}")
    return json_request(cfg.url, event(cfg, n, n.alerts[0], reveal(cfg.routing_key), locale))


#: 202 accepted; 400 invalid event (no retry); 429 and 5xx retried.
#: ~120 events per minute per integration key; events are per alert, so the 512 KB cap is far away.
#: Reason ``ack`` becomes ``acknowledge``; a trigger stays open until resolved.
CHANNEL = HttpChannel(build_request, status_verdict, limits=((120, 60.0),), text_limit=400_000,
                      one_alert_per_request=True, sends_ack=True, opens_incidents=True)
