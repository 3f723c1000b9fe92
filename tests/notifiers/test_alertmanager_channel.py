"""The ``alertmanager`` receiver's request, checked against Alertmanager's API spec (api/v2/openapi.yaml).

``postAlerts`` takes ``postableAlerts``: an array of ``postableAlert`` = ``{startsAt, endsAt
(date-time), annotations (labelSet)}`` + ``alert`` = ``{labels (labelSet, required),
generatorURL (uri)}``; a ``labelSet`` maps strings to strings. Label names must be
Prometheus' (``[a-zA-Z_][a-zA-Z0-9_]*``): Alertmanager answers 400 ``invalid label set``
otherwise. The real Alertmanager takes it in tests/acceptance/test_alertmanager.py.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime

import pytest

from gpuwarden.contract import AlertState
from gpuwarden.notifiers import alertmanager
from gpuwarden.notifiers.delivery import CHANNELS
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.render import Locale
from gpuwarden.notifiers.verdict import Ok, Permanent, Retry
from tests.fakes.alerts import T0, alert

POSTABLE_KEYS = {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
NOW = T0 + 60


def body(receiver: Receiver, *alerts) -> list:
    n = Notification(receiver=receiver.name, group_key="g", alerts=list(alerts), reason="new", at=NOW, id="x")
    req = alertmanager.build_request(receiver.channel, n, Locale("en"), NOW)
    assert req.url == "http://am:9093/api/v2/alerts" and req.headers["Content-Type"].startswith("application/json")
    return json.loads(req.body)


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_the_body_is_a_postable_alerts_array_per_the_spec() -> None:
    r = Receiver(name="am", alertmanager={"url": "http://am:9093/", "generator_url": "http://gw/alerts"})
    odd = alert(2)
    odd.labels |= {"task.class": "llm", "9lives": "x", "empty": ""}
    sent = body(r, alert(1), odd)
    assert isinstance(sent, list) and len(sent) == 2
    for item in sent:
        assert set(item) <= POSTABLE_KEYS and "labels" in item
        for labelset in (item["labels"], item["annotations"]):
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in labelset.items())
        assert all(LABEL_NAME.match(k) for k in item["labels"])
        assert item["generatorURL"] == "http://gw/alerts"
    assert sent[1]["labels"] == {"alertname": "gpu_mem_leak", "severity": "warning", "node": "node-2", "gpu": "2",
                                 "user": "alice", "task": "llama-train", "task_class": "llm", "_9lives": "x"}
    assert sent[0]["annotations"]["gpuwarden_fingerprint"] == alert(1).fingerprint


def test_firing_ends_after_the_ttl_and_a_resolve_at_its_end() -> None:
    r = Receiver(name="am", alertmanager={"url": "http://am:9093", "firing_ttl": "2h"})
    [firing] = body(r, alert(1))
    [resolved] = body(r, alert(1, state=AlertState.RESOLVED))
    assert epoch(firing["startsAt"]) == T0 - 600 and epoch(firing["endsAt"]) == NOW + 7200
    assert epoch(resolved["endsAt"]) == T0 and "generatorURL" not in resolved


def test_a_digest_sends_each_alert_once_in_its_latest_state() -> None:
    r = Receiver(name="am", alertmanager={"url": "http://am:9093"})
    sent = body(r, alert(1), alert(2), alert(1, state=AlertState.RESOLVED))
    assert [a["annotations"]["gpuwarden_fingerprint"] for a in sent] == [alert(1).fingerprint, alert(2).fingerprint]
    assert epoch(sent[0]["endsAt"]) == T0  # alert 1 resolved


def test_auth_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AM_TOKEN", "tok")
    monkeypatch.setenv("AM_PASS", "pw")
    bearer = Receiver(name="a", alertmanager={"url": "http://am:9093", "bearer_token": {"env": "AM_TOKEN"}})
    basic = Receiver(name="b", alertmanager={"url": "http://am:9093",
                                             "basic_auth": {"username": "gw", "password": {"env": "AM_PASS"}}})
    n = Notification(receiver="a", group_key="g", alerts=[alert(1)], reason="new", at=NOW)
    assert alertmanager.build_request(bearer.channel, n, Locale("en"), NOW).headers["Authorization"] == "Bearer tok"
    assert alertmanager.build_request(basic.channel, n, Locale("en"), NOW).headers["Authorization"] == \
        "Basic " + base64.b64encode(b"gw:pw").decode()
    assert CHANNELS["alertmanager"].secrets(basic.channel) == ["pw"]  # nested secrets are found and redacted


def test_answers() -> None:
    c = CHANNELS["alertmanager"]
    assert isinstance(c.classify(200, {}, b""), Ok)
    refused = c.classify(400, {}, b'"invalid label set: invalid name \\"a.b\\""')
    assert isinstance(refused, Permanent) and "invalid label set" in refused.message
    assert isinstance(c.classify(503, {}, b""), Retry) and isinstance(c.classify(429, {}, b""), Retry)
    assert c.rate_limits(None) == []


def test_one_auth_only() -> None:
    with pytest.raises(ValueError, match="either 'bearer_token' or 'basic_auth'"):
        Receiver(name="a", alertmanager={"url": "http://am:9093", "bearer_token": {"env": "X"},
                                         "basic_auth": {"username": "u", "password": {"env": "Y"}}})
