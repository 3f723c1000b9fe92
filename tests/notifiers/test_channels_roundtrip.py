"""Round trips through real loopback sockets: Apprise (json://), WeCom, and wrong tokens on every chat fake."""

from __future__ import annotations

import importlib
import json
import logging
import re
import sys

import pytest

from gpuwarden.contract import AlertState, Tier
from gpuwarden.notifiers import wecom
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.markup import APPRISE
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.render import Locale, render_text
from tests.fakes.alerts import FP, alert, note
from tests.fakes.http import FakeAppriseJson, FakeDingTalk, FakeSlack, FakeWeCom, max_in_window


def apprise_receiver(monkeypatch, url: str, **cfg) -> Receiver:
    monkeypatch.setenv("APPRISE_URL", url)
    return Receiver(name="ap", apprise={"url": {"env": "APPRISE_URL"}, **cfg})


def wecom_receiver(monkeypatch, fake: FakeWeCom, key: str, **cfg) -> Receiver:
    monkeypatch.setenv("WECOM_URL", f"{fake.base}/cgi-bin/webhook/send?key={key}")
    return Receiver(name="wc", wecom={"url": {"env": "WECOM_URL"}, **cfg})


# ----------------------------------------------------------------------------- Apprise


async def test_apprise_json_delivers_the_rendered_title_and_body(monkeypatch, clock, spool):
    with FakeAppriseJson(clock) as sink:
        r = apprise_receiver(monkeypatch, sink.url())
        d = Delivery([r], spool=spool, language="zh-CN", clock=clock, sleep=clock.sleep)
        try:
            fired = note("ap", 1, tier=Tier.CRITICAL)
            resolved = note("ap", 1, state=AlertState.RESOLVED, at=clock() + 60)
            outs = [await d.deliver(fired), await d.deliver(resolved)]
        finally:
            await d.aclose()
    assert [o.status for o in outs] == ["delivered", "delivered"] and outs[0].attempts == 1
    first, second = (q.json for q in sink.accepted)
    title, body = render_text(fired, Locale("zh-CN"), APPRISE)  # declared plain text: no marks
    assert (first["title"], first["message"], first["type"]) == (title, body, "failure")
    assert "建议操作" in first["message"] and FP.findall(first["message"]) == ["fp00001"]
    assert second["type"] == "success" and second["title"] == render_text(resolved, Locale("zh-CN"))[0]


async def test_apprise_target_down_spools_then_delivers_once_after_recovery(monkeypatch, clock, spool):
    with FakeAppriseJson(clock) as sink:
        sink.down_until = clock() + 300
        d = Delivery([apprise_receiver(monkeypatch, sink.url())], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            first = await d.deliver(note("ap", 1))
            second = await d.deliver(note("ap", 2))
            assert (first.status, second.status) == ("spooled", "spooled") and d.pending("ap") == 2
            assert first.detail == "receiver down: queued until it recovers"
            await d.wait_idle()
            assert d.drain() == 0
        finally:
            await d.aclose()
    assert [q.answer[0] for q in sink.requests[:4]] == [503] * 4  # 4 attempts, each a real POST
    assert clock() >= sink.down_until and d.pending("ap") == 0
    (digest,) = sink.accepted
    assert FP.findall(digest.json["message"]) == ["fp00001", "fp00002"]
    assert digest.at >= sink.down_until


async def test_apprise_rate_limit_is_configurable_and_bursts_become_digests(monkeypatch, clock, spool):
    with FakeAppriseJson(clock) as sink:
        r = apprise_receiver(monkeypatch, sink.url(), rate_limit=2, rate_window="1m")
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            statuses = [(await d.deliver(note("ap", i))).status for i in range(6)]
            await d.wait_idle()
        finally:
            await d.aclose()
    assert statuses == ["delivered", "delivered"] + ["spooled"] * 4
    assert max_in_window([q.at for q in sink.accepted], 60.0) <= 2
    seen = [fp for q in sink.accepted for fp in FP.findall(q.json["message"])]
    assert seen == [f"fp{i:05d}" for i in range(6)]  # all of them, in order, once
    assert len(sink.accepted) == 3


async def test_apprise_logs_go_through_redaction(monkeypatch, clock, spool, caplog):
    caplog.set_level(logging.DEBUG)
    with FakeAppriseJson(clock) as sink:
        password = "apprise-basic-pw-42"
        url = sink.url().replace("json://", f"json://gpuwarden:{password}@")
        d = Delivery([apprise_receiver(monkeypatch, url)], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            sink.script.append((500, {}, b"boom"))
            out = await d.deliver(note("ap", 3))
        finally:
            await d.aclose()
    assert out.status == "delivered" and out.attempts == 2
    assert "Failed to send JSON POST notification" in caplog.text  # apprise did log the failure
    assert "HTTP/1.1" in caplog.text  # urllib3 logged the request line (path masked)
    token = sink.path.rsplit("/", 1)[1]
    assert token not in caplog.text and password not in caplog.text
    assert all(token not in e["detail"] for e in d.log.read(100))


async def test_apprise_without_the_extra_or_with_a_bad_url_fails_at_start(monkeypatch, spool):
    r = apprise_receiver(monkeypatch, "json://127.0.0.1:9/hooks/token-abc-123456")
    monkeypatch.setitem(sys.modules, "apprise", None)  # as if the extra were not installed
    with pytest.raises(ValueError, match=re.escape("receivers ap: the apprise channel needs the apprise extra "
                                                   "(pip install 'gpuwarden[apprise]')")):
        Delivery([r], spool=spool)
    monkeypatch.delitem(sys.modules, "apprise")
    monkeypatch.setattr(importlib.import_module("apprise"), "__version__", "1.13.1")  # the last 1.x fails the escaping
    with pytest.raises(ValueError, match=re.escape("receivers ap: the apprise channel needs apprise 2.0 or later, "
                                                   "found 1.13.1")):
        Delivery([r], spool=spool)
    monkeypatch.undo()
    bad = apprise_receiver(monkeypatch, "nosuchschema://secret-token-987654")
    with pytest.raises(ValueError, match="apprise does not accept the URL in APPRISE_URL") as e:
        Delivery([bad], spool=spool)
    assert "secret-token-987654" not in str(e.value)


async def test_apprise_silent_target_is_a_retry_within_the_delivery_timeout(monkeypatch, clock, spool, caplog):
    import socket

    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"json://127.0.0.1:{silent.getsockname()[1]}/hooks/silent-token-123456"
        d = Delivery([apprise_receiver(monkeypatch, url)], spool=spool, clock=clock, sleep=clock.sleep,
                     timeout_s=0.5, max_attempts=2)
        try:
            out = await d.deliver(note("ap", 4))
        finally:
            await d.aclose()
    assert out.status == "spooled" and d.pending("ap") == 1
    assert "ap (apprise): still failing after 2 attempt(s): apprise: " in caplog.text
    assert "silent-token-123456" not in caplog.text


# ----------------------------------------------------------------------------- WeCom


def wide(receiver: str, k: int) -> Notification:
    return Notification(receiver=receiver, group_key="g", alerts=[alert(i) for i in range(k)], reason="new",
                        at=1_767_225_600.0, id="wide")


async def test_wecom_markdown_arrives_intact_within_4096_bytes(monkeypatch, clock, spool):
    with FakeWeCom(clock) as fake:
        r = wecom_receiver(monkeypatch, fake, fake.key, mention_user_ids=["zhangsan"])
        d = Delivery([r], spool=spool, language="zh-CN", clock=clock, sleep=clock.sleep)
        try:
            small, big = note("wc", 1), wide("wc", 120)
            outs = [await d.deliver(small), await d.deliver(big)]
        finally:
            await d.aclose()
    assert [o.status for o in outs] == ["delivered", "delivered"]
    got = [q.json["markdown"]["content"] for q in fake.accepted]
    assert got == [wecom.content(r.channel, small, Locale("zh-CN")), wecom.content(r.channel, big, Locale("zh-CN"))]
    assert all(len(c.encode()) <= 4096 and c.endswith("<@zhangsan>") for c in got)
    assert len(got[1].encode()) > 4000  # the big one was cut near the limit, not far below it
    assert "建议操作" in got[0] and FP.findall(got[0]) == ["fp00001"]


async def test_wecom_45009_is_retried_after_the_platform_window(monkeypatch, clock, spool):
    with FakeWeCom(clock) as fake:
        for _ in range(20):  # another sender used up this robot's 20/min just now
            assert fake.admit(clock())
        d = Delivery([wecom_receiver(monkeypatch, fake, fake.key)], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note("wc", 5))
        finally:
            await d.aclose()
    assert out.status == "delivered" and out.attempts == 2
    first, second = fake.requests
    assert json.loads(first.answer[2]) == {"errcode": 45009, "errmsg": "api freq out of limit"}
    assert json.loads(second.answer[2])["errcode"] == 0
    assert second.at - first.at >= wecom.RATE_LIMIT_WAIT_S


# ----------------------------------------------------------------------------- wrong URL / token


WRONG = "wrong-token-value-31337"


def wrong_slack(monkeypatch, fake: FakeSlack) -> Receiver:
    monkeypatch.setenv("SL_URL", f"{fake.base}/services/T000/B000/{WRONG}")
    return Receiver(name="x", slack={"url": {"env": "SL_URL"}})


def wrong_dingtalk_token(monkeypatch, fake: FakeDingTalk) -> Receiver:
    monkeypatch.setenv("DT_URL", f"{fake.base}/robot/send?access_token={WRONG}")
    return Receiver(name="x", dingtalk={"url": {"env": "DT_URL"}})


def wrong_dingtalk_secret(monkeypatch, fake: FakeDingTalk) -> Receiver:
    monkeypatch.setenv("DT_URL", f"{fake.base}/robot/send?access_token={fake.token}")
    monkeypatch.setenv("DT_SECRET", "SEC" + WRONG)
    return Receiver(name="x", dingtalk={"url": {"env": "DT_URL"}, "secret": {"env": "DT_SECRET"}})


def wrong_wecom(monkeypatch, fake: FakeWeCom) -> Receiver:
    return wecom_receiver(monkeypatch, fake, WRONG)


@pytest.mark.parametrize("make_fake, make_receiver, status, platform_text", [
    (FakeSlack, wrong_slack, 404, "no_service"),
    (FakeDingTalk, wrong_dingtalk_token, 200, "errcode 300001: token is not exist"),
    (lambda clock: FakeDingTalk(clock, secret="SECthe-real-signing-secret"), wrong_dingtalk_secret, 200,
     "errcode 310000: sign not match"),
    (FakeWeCom, wrong_wecom, 200, "errcode 93000: invalid webhook url"),
], ids=["slack-404-no_service", "dingtalk-300001-token", "dingtalk-310000-sign", "wecom-93000-key"])
async def test_wrong_token_is_permanent_not_retried_and_logged_without_the_secret(
        monkeypatch, clock, spool, caplog, make_fake, make_receiver, status, platform_text):
    caplog.set_level(logging.INFO)
    with make_fake(clock) as fake:
        r = make_receiver(monkeypatch, fake)
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note(r.name, 9))
        finally:
            await d.aclose()
    (only,) = fake.requests  # not retried
    assert only.answer[0] == status and fake.accepted == []
    assert out.status == "failed" and out.attempts == 1 and d.pending(r.name) == 0
    assert platform_text in out.detail
    assert "permanent error after 1 attempt(s): " in caplog.text and platform_text in caplog.text
    assert "HTTP Request: POST" in caplog.text  # httpx logged the URL: masked
    entries = d.log.read(10)
    assert entries[-1]["status"] == "failed" and platform_text in entries[-1]["detail"]
    assert WRONG not in caplog.text + repr(out) + repr(entries)
