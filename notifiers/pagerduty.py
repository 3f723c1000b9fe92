"""PagerDuty Events API v2: trigger / acknowledge / resolve, one event per alert.

``dedup_key`` is the alert fingerprint, so PagerDuty's incident follows the
alert's life; severity comes from the tier.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpuwarden.contract import AlertState, AlertTransition, Tier
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import PagerDutyConfig
from gpuwarden.notifiers.render import alert_block
from gpuwarden.notifiers.verdict import HttpRequest, Ok, Permanent, Verdict, http_status_verdict, json_request, reveal

RATE_LIMITS = [(120, 60.0)]  # ~120 events per minute per integration key
TEXT_LIMIT = 400_000  # events are per alert; the 512 KB cap is far away
ONE_ALERT_PER_REQUEST = True
SENDS_ACK = True  # reason "ack" → event_action "acknowledge" (other channels skip it)
OPENS_INCIDENTS = True  # a trigger stays open until resolved: test-notify resolves its own
SUMMARY_CHARS = 1024
SEVERITY = {Tier.CRITICAL: "critical", Tier.ATTENTION: "warning", Tier.INFO: "info"}


def event_action(n: Notification, a: AlertTransition) -> str:
    if a.state == AlertState.RESOLVED:
        return "resolve"
    return "acknowledge" if n.reason == "ack" else "trigger"


def event(cfg: PagerDutyConfig, n: Notification, a: AlertTransition, routing_key: str, language: str) -> dict:
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
        "custom_details": {"labels": a.labels, "action": a.action, "details": alert_block(a, language),
                           "mentions": n.mentions, "escalation_level": n.escalation_level},
    }
    ev["payload"] = {k: v for k, v in ev["payload"].items() if v is not None}
    ev["client"] = "gpuwarden"
    return ev


def build_request(cfg: PagerDutyConfig, n: Notification, language: str, now: float) -> HttpRequest:
    """One event for the notification's single alert (delivery splits groups: ONE_ALERT_PER_REQUEST)."""
    if len(n.alerts) != 1:
        raise ValueError(f"PagerDuty events carry one alert; got {len(n.alerts)}")
    return json_request(cfg.url, event(cfg, n, n.alerts[0], reveal(cfg.routing_key), language))


def classify(status: int, headers: object, body: bytes) -> Verdict:
    """202 accepted; 400 invalid event (no retry); 429 and 5xx retried."""
    if (v := http_status_verdict(status, headers, body)) is not None:
        return v
    if 200 <= status < 300:
        return Ok()
    return Permanent(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")
