"""Alertmanager's webhook → gpuwarden's transitions, on bodies a real Alertmanager 0.25.0 posted.

The fixtures (tests/fixtures/alertmanager/) were captured from Debian's
prometheus-alertmanager, not written from the parser; the error cases follow
the webhook's documented shape (Alertmanager docs/configuration.md, webhook_config).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwarden.contract import AlertState, Tier
from gpuwarden.notifiers.am_ingest import PayloadError, parse, transitions
from gpuwarden.notifiers.config import AlertmanagerWebhookConfig

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "alertmanager"
FIRING = (FIXTURES / "am-0.25.0-webhook-firing.json").read_bytes()
RESOLVED = (FIXTURES / "am-0.25.0-webhook-resolved.json").read_bytes()
CFG = AlertmanagerWebhookConfig()


def _with(body: bytes, **alert: object) -> bytes:
    msg = json.loads(body)
    msg["alerts"][0].update(alert)
    return json.dumps(msg).encode()


def test_a_firing_alert_maps_label_by_label() -> None:
    [t] = transitions(parse(FIRING), CFG)
    assert t.fingerprint == "am-c77244967ba00f9a"  # Alertmanager's own, prefixed
    assert t.rule == "GpuXid79" and t.tier == Tier.CRITICAL and t.state == AlertState.FIRING
    assert t.labels == {"gpu": "3", "instance": "gpu-07:9400", "job": "dcgm", "node": "gpu-07", "severity": "critical"}
    assert t.started_at == pytest.approx(1796124498.123456)  # Go's nanoseconds, to the microsecond
    assert t.ts == t.started_at and t.ended_at is None  # Go's zero endsAt is "not ended"
    assert t.summary == "GPU fell off the bus"
    assert t.action == "https://runbooks.example.org/xid79"
    assert t.evidence.note == ("XID 79 on gpu-07 GPU 3; http://prometheus.example.org:9090/graph?"
                               "g0.expr=DCGM_FI_DEV_XID_ERRORS+%3D%3D+79&g0.tab=1")


def test_its_resolve_is_the_same_alert_ending_at_endsat() -> None:
    [fired], [t] = transitions(parse(FIRING), CFG), transitions(parse(RESOLVED), CFG)
    assert t.fingerprint == fired.fingerprint and t.started_at == fired.started_at
    assert t.state == AlertState.RESOLVED and t.ended_at == t.ts == pytest.approx(1796124621.0)


@pytest.mark.parametrize(("severity", "tier"), [("critical", Tier.CRITICAL), ("Warning", Tier.ATTENTION),
                                                ("info", Tier.INFO), ("page-me", Tier.ATTENTION), (None, Tier.ATTENTION)])
def test_the_severity_label_picks_the_tier(severity: str | None, tier: Tier) -> None:
    labels = {"alertname": "X"} | ({"severity": severity} if severity else {})
    [t] = transitions(parse(_with(FIRING, labels=labels)), CFG)
    assert t.tier == tier


def test_severity_mapping_and_default_are_configurable() -> None:
    cfg = AlertmanagerWebhookConfig(severity_tiers={"P1": "critical"}, default_tier="info")
    [p1] = transitions(parse(_with(FIRING, labels={"alertname": "X", "severity": "p1"})), cfg)
    [other] = transitions(parse(_with(FIRING, labels={"alertname": "X", "severity": "critical"})), cfg)
    assert (p1.tier, other.tier) == (Tier.CRITICAL, Tier.INFO)


def test_summary_falls_back_to_description_then_the_alert_name() -> None:
    [d] = transitions(parse(_with(FIRING, annotations={"description": "only this"})), CFG)
    [n] = transitions(parse(_with(FIRING, annotations={}, generatorURL="")), CFG)
    assert (d.summary, d.evidence.note) == ("only this", "http://prometheus.example.org:9090/graph?"
                                                         "g0.expr=DCGM_FI_DEV_XID_ERRORS+%3D%3D+79&g0.tab=1")
    assert (n.summary, n.evidence.note, n.action) == ("GpuXid79", None, "")


def test_no_fingerprint_from_the_sender_hashes_the_label_set() -> None:
    [a] = transitions(parse(_with(FIRING, fingerprint="")), CFG)
    [b] = transitions(parse(_with(FIRING, fingerprint="", labels={"severity": "critical", "alertname": "GpuXid79",
                                                                   "node": "gpu-07", "gpu": "3", "job": "dcgm",
                                                                   "instance": "gpu-07:9400"})), CFG)
    assert a.fingerprint == b.fingerprint and a.fingerprint.startswith("am-") and len(a.fingerprint) == 19


def test_alerts_gpuwarden_sent_to_alertmanager_do_not_come_back() -> None:
    body = _with(FIRING, annotations={"summary": "s", "gpuwarden_fingerprint": "0123abcd"})
    assert transitions(parse(body), CFG) == []


@pytest.mark.parametrize(("body", "reason"), [
    (b"[]", "Input should be an object"),
    (b"{not json", "Invalid JSON"),
    (json.dumps({**json.loads(FIRING), "version": "3"}).encode(), "version: Input should be '4'"),
    (json.dumps({k: v for k, v in json.loads(FIRING).items() if k != "alerts"}).encode(), "alerts: Field required"),
    (_with(FIRING, status="pending"), "alerts[0].status: Input should be 'firing' or 'resolved'"),
    (_with(FIRING, labels={}), "alerts[0].labels"),
    (_with(FIRING, startsAt="2026-12-01 11:28"), "alerts[0].startsAt"),
    (_with(FIRING, startsAt="2026-12-01T11:28:18"), "alerts[0].startsAt: Input should have timezone info"),
])
def test_what_is_not_a_v4_payload_is_refused_naming_the_field(body: bytes, reason: str) -> None:
    with pytest.raises(PayloadError) as e:
        parse(body)
    assert reason in str(e.value)


@pytest.mark.parametrize(("alert", "reason"), [
    ({"status": "resolved", "endsAt": "0001-01-01T00:00:00Z"}, "alerts[0].endsAt: expected the time"),
    ({"startsAt": "0001-01-01T00:00:00Z"}, "alerts[0].startsAt: expected a time"),
    ({"labels": {"alertname": "X", "node": "n" * 300}}, "alerts[0].labels.node: String should have at most 256"),
])
def test_an_alert_gpuwarden_cannot_hold_fails_the_whole_payload(alert: dict, reason: str) -> None:
    with pytest.raises(PayloadError) as e:
        transitions(parse(_with(FIRING, **alert)), CFG)
    assert reason in str(e.value)
    assert "n" * 20 not in str(e.value)  # the value itself is never echoed


def test_long_text_is_cut_to_the_contracts_limit() -> None:
    [t] = transitions(parse(_with(FIRING, annotations={"summary": "x" * 10_000})), CFG)
    assert len(t.summary) == 4096 and t.summary.endswith("…")
