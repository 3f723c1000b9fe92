"""Pure channel code: payload shapes, limits and response classification."""

from __future__ import annotations

import json

from gpuwarden.contract import AlertState, Tier
from gpuwarden.notifiers import dingtalk, feishu, pagerduty, slack, webhook, wecom
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.render import Locale, render_text, truncate_utf8
from gpuwarden.notifiers.verdict import Ok, Permanent, Retry
from tests.fakes.alerts import alert, note
from tests.fakes.http import valid_block


def many(receiver: str, k: int) -> Notification:
    return Notification(receiver=receiver, group_key="g", alerts=[alert(i) for i in range(k)], reason="new",
                        at=1.8e9, id="big")


def test_render_has_evidence_and_action_in_both_languages():
    title, body = render_text(note("x", 1, tier=Tier.CRITICAL), Locale("en"))
    assert title.startswith("[CRITICAL]") and "Recommended action: Check the training loop" in body
    assert "mem_used_gib=61.5" in body and "slope 0.8 GiB/h" in body and "held for 15 min" in body
    title, body = render_text(note("x", 1, tier=Tier.CRITICAL), Locale("zh-CN"))
    assert title.startswith("[严重]") and "建议操作" in body and "证据" in body
    _, body = render_text(note("x", 1, state=AlertState.RESOLVED), Locale("en"))
    assert "Recommended action" not in body and "resolved" in body


def test_slack_never_exceeds_50_blocks(monkeypatch):
    monkeypatch.setenv("U", "http://127.0.0.1/x")
    r = Receiver(name="s", slack={"url": {"env": "U"}})
    body = json.loads(slack.build_request(r.channel, many("s", 2000), Locale("en"), 0).body)
    assert len(body["blocks"]) == 50 and body["text"]
    assert all(valid_block(b) for b in body["blocks"])
    assert all(sum(len(e["text"]) for o in b["elements"] for e in o["elements"]) <= 3000
               for b in body["blocks"] if b["type"] == "rich_text")


def test_wecom_markdown_is_cut_on_a_utf8_boundary(monkeypatch):
    monkeypatch.setenv("U", "http://127.0.0.1/cgi-bin/webhook/send?key=k")
    r = Receiver(name="w", wecom={"url": {"env": "U"}, "mention_user_ids": ["zhangsan"]})
    content = json.loads(wecom.build_request(r.channel, many("w", 300), Locale("zh-CN"), 0).body)["markdown"]["content"]
    raw = content.encode()
    assert len(raw) <= 4096 and raw.decode() == content and content.endswith("<@zhangsan>")
    assert truncate_utf8("告警" * 10, 7, marker="") == "告警"  # 6 bytes: never half a character


def test_pagerduty_event_actions_and_severity(monkeypatch):
    monkeypatch.setenv("K", "k" * 32)
    r = Receiver(name="p", pagerduty={"routing_key": {"env": "K"}})
    for tier, sev in [(Tier.CRITICAL, "critical"), (Tier.ATTENTION, "warning"), (Tier.INFO, "info")]:
        ev = json.loads(pagerduty.build_request(r.channel, note("p", 1, tier=tier), Locale("en"), 0).body)
        assert ev["event_action"] == "trigger" and ev["payload"]["severity"] == sev
    ack = Notification(receiver="p", group_key="g", alerts=[alert(1)], reason="ack", at=0)
    assert json.loads(pagerduty.build_request(r.channel, ack, Locale("en"), 0).body)["event_action"] == "acknowledge"
    assert isinstance(pagerduty.CHANNEL.classify(202, {}, b"{}"), Ok)
    assert isinstance(pagerduty.CHANNEL.classify(400, {}, b'{"message":"Event object is invalid"}'), Permanent)
    assert isinstance(pagerduty.CHANNEL.classify(429, {}, b""), Retry) and isinstance(pagerduty.CHANNEL.classify(502, {}, b""), Retry)


def test_in_body_codes_classify():
    assert isinstance(feishu.classify(200, {}, b'{"code":0,"msg":"success"}'), Ok)
    assert isinstance(feishu.classify(200, {}, b'{"code":11232,"msg":"frequency limited"}'), Retry)
    assert isinstance(feishu.classify(200, {}, b'{"code":9499,"msg":"Bad Request"}'), Permanent)
    assert isinstance(dingtalk.classify(200, {}, b'{"errcode":130101,"errmsg":"send too fast"}'), Retry)
    assert isinstance(dingtalk.classify(200, {}, b'{"errcode":310000,"errmsg":"sign not match"}'), Permanent)
    assert isinstance(wecom.classify(200, {}, b'{"errcode":45009,"errmsg":"api freq out of limit"}'), Retry)
    r = slack.classify(429, {"retry-after": "12"}, b"rate_limited")
    assert isinstance(r, Retry) and r.after_s == 12.0
    assert isinstance(slack.classify(400, {}, b"invalid_payload"), Permanent)


def test_webhook_truncates_like_alertmanager(monkeypatch):
    monkeypatch.setenv("U", "http://127.0.0.1/hook")
    r = Receiver(name="h", webhook={"url": {"env": "U"}, "max_alerts": 2})
    body = json.loads(webhook.build_request(r.channel, many("h", 5), Locale("en"), 0).body)
    assert body["version"] == "4" and len(body["alerts"]) == 2 and body["truncatedAlerts"] == 3
    assert body["commonLabels"]["alertname"] == "gpu_mem_leak"


def test_a_digest_title_says_what_its_body_says():
    from gpuwarden.notifiers.delivery import digest

    items = [note("x", i, tier=Tier.CRITICAL) for i in range(3)]
    items += [note("x", i, tier=Tier.CRITICAL, state=AlertState.RESOLVED) for i in (3, 4)]
    title, body = render_text(digest("x", items), Locale("en"))
    assert "3 firing, 2 resolved" in body
    assert title.startswith("[CRITICAL] 3 firing, 2 resolved: ") and title.endswith("(+4)")
    title, _ = render_text(digest("x", items[:3]), Locale("en"))
    assert title.startswith("[CRITICAL] firing: ")  # all firing: unchanged
