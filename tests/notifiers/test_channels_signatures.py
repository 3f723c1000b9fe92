"""Signature vectors: each computed here from the documented formula, independently of the channel code."""

from __future__ import annotations

import base64
import hashlib
import hmac
import urllib.parse

import pytest

from gpuwarden.notifiers import dingtalk, feishu
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.render import Locale
from tests.fakes.alerts import note
from tests.fakes.http import FakeDingTalk, FakeFeishu


def test_feishu_sign_vector():
    # Feishu: key = timestamp + "\n" + secret, message = empty, base64 of the HMAC-SHA256 digest.
    ts, secret = 1599360473, "demo-secret"
    expected = base64.b64encode(hmac.new(b"1599360473\ndemo-secret", digestmod=hashlib.sha256).digest()).decode()
    assert feishu.sign(ts, secret) == expected


def test_dingtalk_sign_vector():
    # DingTalk: key = secret, message = timestamp(ms) + "\n" + secret, base64, then URL-encoded.
    ts, secret = 1577836800000, "SEC000000000000000000000"
    mac = hmac.new(secret.encode(), b"1577836800000\nSEC000000000000000000000", hashlib.sha256).digest()
    assert dingtalk.sign(ts, secret) == urllib.parse.quote_plus(base64.b64encode(mac))


def test_signed_requests_carry_timestamp_in_the_documented_unit(monkeypatch):
    monkeypatch.setenv("U", "http://127.0.0.1:1/robot/send?access_token=t")
    monkeypatch.setenv("S", "SECabc")
    r = Receiver(name="dt", dingtalk={"url": {"env": "U"}, "secret": {"env": "S"}})
    url = dingtalk.build_request(r.channel, note("dt", 1), Locale("en"), 1577836800.25).url
    q = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert q["timestamp"] == ["1577836800250"] and q["access_token"] == ["t"]
    monkeypatch.setenv("F", "http://127.0.0.1:1/open-apis/bot/v2/hook/x")
    f = Receiver(name="fs", feishu={"url": {"env": "F"}, "secret": {"env": "S"}})
    import json
    body = json.loads(feishu.build_request(f.channel, note("fs", 1), Locale("en"), 1577836800.9).body)
    assert body["timestamp"] == "1577836800" and body["msg_type"] == "interactive" and "card" in body


@pytest.mark.parametrize("platform", ["feishu", "dingtalk"])
async def test_fakes_accept_good_signatures_and_reject_bad_ones(platform, monkeypatch):
    import httpx

    from tests.fakes.clock import SimClock

    clock = SimClock()
    module, Fake = (feishu, FakeFeishu) if platform == "feishu" else (dingtalk, FakeDingTalk)
    with Fake(clock, secret="SECright") as fake:
        url = fake.base + (fake.hook if platform == "feishu" else f"/robot/send?access_token={fake.token}")
        monkeypatch.setenv("URL", url)
        answers = []
        for secret in ("SECright", "SECwrong"):
            monkeypatch.setenv("SEC", secret)
            r = Receiver(name="x", **{platform: {"url": {"env": "URL"}, "secret": {"env": "SEC"}}})
            req = module.build_request(r.channel, note("x", 1), Locale("zh-CN"), clock())
            async with httpx.AsyncClient() as c:
                resp = await c.post(req.url, content=req.body, headers=req.headers)
            answers.append(module.classify(resp.status_code, resp.headers, resp.content))
    good, bad = answers
    assert type(good).__name__ == "Ok"
    assert type(bad).__name__ == "Permanent" and ("19021" in bad.message or "310000" in bad.message)
