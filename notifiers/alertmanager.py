"""Prometheus Alertmanager as a receiver: gpuwarden's alerts POSTed to its ``/api/v2/alerts``.

The body is the API's ``postableAlerts`` (api/v2/openapi.yaml): a JSON *array*
of ``{labels, annotations, startsAt, endsAt, generatorURL}``. An object there
(the ``webhook`` channel's v4 payload) is what Alertmanager refuses with "cannot
unmarshal object into Go value of type models.PostableAlerts". Alertmanager
identifies an alert by its label set and resolves it itself once ``endsAt``
passes, so a firing alert carries ``endsAt`` = now + ``firing_ttl`` and a
resolved one its own end.
"""

from __future__ import annotations

import re

from gpuwarden.contract import AlertState, AlertTransition, Tier
from gpuwarden.notifiers.am_ingest import ORIGIN_ANNOTATION
from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import AlertmanagerConfig
from gpuwarden.notifiers.render import Locale
from gpuwarden.notifiers.verdict import HttpRequest, authorization, json_request, status_verdict
from gpuwarden.notifiers.webhook import am_annotations, rfc3339

API_PATH = "/api/v2/alerts"
#: Prometheus' usual severities, the inverse of the webhook ingest's default ``severity_tiers``.
SEVERITY = {Tier.CRITICAL: "critical", Tier.ATTENTION: "warning", Tier.INFO: "info"}
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def label_name(key: str) -> str:
    """A Prometheus label name (``[a-zA-Z_][a-zA-Z0-9_]*``): Alertmanager refuses any other."""
    name = _NOT_NAME.sub("_", key)
    return f"_{name}" if not name or name[0].isdigit() else name


def postable(cfg: AlertmanagerConfig, a: AlertTransition, locale: Locale, now: float) -> dict:
    """One ``postableAlert``; empty label values are left out (in Prometheus they mean "no label")."""
    labels = {label_name(k): v for k, v in a.labels.items() if v}
    labels |= {"alertname": a.rule, "severity": SEVERITY[a.tier]}
    resolved = a.state == AlertState.RESOLVED and a.ended_at is not None
    alert = {
        "labels": labels,
        "annotations": {**am_annotations(a, locale), ORIGIN_ANNOTATION: a.fingerprint},
        "startsAt": rfc3339(a.started_at),
        "endsAt": rfc3339(a.ended_at if resolved else now + cfg.firing_ttl),
    }
    if cfg.generator_url:
        alert["generatorURL"] = cfg.generator_url
    return alert


def build_request(cfg: AlertmanagerConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    """One request for the whole notification; a digest holding an alert twice (fired, then resolved
    while the receiver was down) sends its latest state only, as Alertmanager keeps one per label set."""
    latest = {a.fingerprint: a for a in n.alerts}
    body = [postable(cfg, a, locale, now) for a in latest.values()]
    auth = authorization(cfg.bearer_token, cfg.basic_auth)
    return json_request(cfg.url.rstrip("/") + API_PATH, body, {"Authorization": auth} if auth else {})


#: 200 accepted; 400 (a payload it refuses, the reason in the body) permanent; 429 and 5xx retried.
#: No documented rate limit; one request carries the whole group (or digest).
CHANNEL = HttpChannel(build_request, status_verdict, limits=(), text_limit=1_000_000)
