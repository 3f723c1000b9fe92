"""Delivery through real sockets to the fake platforms, on simulated time."""

from __future__ import annotations

import random

from gpuwarden.contract import Tier
from gpuwarden.notifiers.delivery import PROBE_S, Delivery
from gpuwarden.notifiers.receivers import Receiver
from tests.fakes.alerts import FP, note
from tests.fakes.http import FakeDingTalk, FakeFeishu, FakePagerDuty, FakeSlack, FakeWebhook, max_in_window
from tests.fakes.smtp import FakeSmtp


def dingtalk_receiver(monkeypatch, fake: FakeDingTalk, secret: str | None, **extra) -> Receiver:
    monkeypatch.setenv("DT_URL", f"{fake.base}/robot/send?access_token={fake.token}")
    cfg: dict = {"url": {"env": "DT_URL"}}
    if secret:
        monkeypatch.setenv("DT_SECRET", secret)
        cfg["secret"] = {"env": "DT_SECRET"}
    return Receiver(name="dt", dingtalk=cfg, **extra)


def feishu_receiver(monkeypatch, fake: FakeFeishu, secret: str | None, **extra) -> Receiver:
    monkeypatch.setenv("FS_URL", fake.base + fake.hook)
    cfg: dict = {"url": {"env": "FS_URL"}}
    if secret:
        monkeypatch.setenv("FS_SECRET", secret)
        cfg["secret"] = {"env": "FS_SECRET"}
    return Receiver(name="fs", feishu=cfg, **extra)


async def test_200_alerts_to_one_dingtalk_robot_stay_within_20_per_minute_and_lose_nothing(monkeypatch, clock, spool):
    with FakeDingTalk(clock, secret="SECdingtalk-signing-secret") as fake:
        r = dingtalk_receiver(monkeypatch, fake, "SECdingtalk-signing-secret")
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            statuses = []
            for i in range(200):
                statuses.append((await d.deliver(note("dt", i))).status)
                await clock.sleep(0.5)  # 200 alerts over 100 simulated seconds
            await d.wait_idle()
        finally:
            await d.aclose()
    assert statuses.count("delivered") + statuses.count("spooled") == 200 and statuses.count("spooled") > 100
    rejected = [q for q in fake.requests if q not in fake.accepted]
    assert rejected == []  # never had to be told "send too fast"
    assert max_in_window([q.at for q in fake.accepted], 60.0) <= 20
    seen = [fp for q in fake.accepted for fp in FP.findall(q.json["markdown"]["text"])]
    assert sorted(set(seen)) == [f"fp{i:05d}" for i in range(200)]
    assert len(fake.accepted) <= 60  # ~2.5 simulated minutes at 20/min: merged into digests
    assert d.pending("dt") == 0


async def test_slack_429_retry_after_is_honoured(monkeypatch, clock, spool):
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SLACK_URL", fake.base + fake.path)
        fake.script.append((429, {"Retry-After": "7"}, b"rate_limited"))
        d = Delivery([Receiver(name="sl", slack={"url": {"env": "SLACK_URL"}})], spool=spool,
                     clock=clock, sleep=clock.sleep, rng=lambda: 0.0)
        try:
            out = await d.deliver(note("sl", 1))
        finally:
            await d.aclose()
    assert out.status == "delivered" and out.attempts == 2
    first, second = fake.requests
    assert first.answer[0] == 429 and second.answer[0] == 200
    assert second.at - first.at >= 7.0
    assert len(second.json["blocks"]) <= 50 and second.json["text"]


async def test_channel_down_five_minutes_spools_then_delivers_exactly_once(monkeypatch, clock, spool):
    with FakeFeishu(clock, secret="feishu-signing-secret") as fake:
        fake.down_until = clock() + 300
        r = feishu_receiver(monkeypatch, fake, "feishu-signing-secret")
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            first = await d.deliver(note("fs", 1))
            second = await d.deliver(note("fs", 2))
            assert (first.status, second.status) == ("spooled", "spooled")
            assert d.pending("fs") == 2
            await d.wait_idle()
            assert d.drain() == 0  # nothing left, nothing sent twice
            again = await d.deliver(note("fs", 1))  # the same id again
        finally:
            await d.aclose()
    assert again.detail == "already delivered (same id)"
    assert clock() >= fake.down_until
    assert len(fake.accepted) == 1  # both, in one digest, once
    card = fake.accepted[0].json["card"]["elements"][0]["text"]["content"]
    assert FP.findall(card) == ["fp00001", "fp00002"]  # in order
    statuses = [(e["notification_id"], e["status"]) for e in d.log.read(100)]
    assert ("n1", "spooled") in statuses and statuses.count(("n1", "delivered")) == 1


async def test_spooled_notifications_survive_a_restart_and_drain_in_order(monkeypatch, clock, spool):
    with FakeFeishu(clock) as fake:
        fake.down_until = clock() + 10_000
        r = feishu_receiver(monkeypatch, fake, None)
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep, max_attempts=2)
        for i in range(3):
            assert (await d.deliver(note("fs", i))).status == "spooled"
        await d.aclose()  # "crash": flusher gone, spool keeps the queue
        fake.down_until = None
        d2 = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            assert d2.drain() == 3  # the restarted worker picks the queue up
            await d2.wait_idle()
            assert d2.drain() == 0
        finally:
            await d2.aclose()
    # a fresh worker has room for each (Feishu 5/s): sent one by one, in queue order
    sent = [fp for q in fake.accepted for fp in FP.findall(q.json["card"]["elements"][0]["text"]["content"])]
    assert sent == ["fp00000", "fp00001", "fp00002"]


async def test_critical_alert_with_primary_down_reaches_the_fallback(monkeypatch, clock, spool):
    with FakeFeishu(clock) as fs, FakeDingTalk(clock) as dt:
        fs.down_until = clock() + 3600
        primary = feishu_receiver(monkeypatch, fs, None, fallback=["dt"])
        d = Delivery([primary, dingtalk_receiver(monkeypatch, dt, None)], spool=spool,
                     clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note("fs", 7, tier=Tier.CRITICAL))
            later = await d.deliver(note("fs", 8, tier=Tier.CRITICAL))  # primary known down: straight to fallback
        finally:
            await d.aclose()
    assert (out.status, later.status) == ("fallback", "fallback")
    assert len(fs.requests) == 4  # max_attempts on the first, none on the second
    assert [FP.findall(q.json["markdown"]["text"]) for q in dt.accepted] == [["fp00007"], ["fp00008"]]
    assert d.pending("fs") == 0


async def test_permanent_error_is_not_retried_and_logged_with_the_platform_message(monkeypatch, clock, spool, caplog):
    with FakeFeishu(clock, secret="right-secret") as fake:
        r = feishu_receiver(monkeypatch, fake, "wrong-secret")
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note("fs", 1))
        finally:
            await d.aclose()
    assert out.status == "failed" and out.attempts == 1 and len(fake.requests) == 1
    assert "19021" in out.detail and "sign match fail" in out.detail
    assert "sign match fail" in caplog.text
    assert d.pending("fs") == 0


async def test_pagerduty_trigger_then_resolve_share_the_fingerprint(monkeypatch, clock, spool):
    from gpuwarden.contract import AlertState

    with FakePagerDuty(clock) as fake:
        monkeypatch.setenv("PD_KEY", "R0UT1NGKEY0123456789abcdefABCDEF")
        r = Receiver(name="pd", pagerduty={"routing_key": {"env": "PD_KEY"}, "url": fake.base + "/v2/enqueue"})
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            a = await d.deliver(note("pd", 3, tier=Tier.CRITICAL))
            b = await d.deliver(note("pd", 3, tier=Tier.CRITICAL, state=AlertState.RESOLVED, at=clock() + 60))
        finally:
            await d.aclose()
    assert a.status == b.status == "delivered"
    trig, res = (q.json for q in fake.accepted)
    assert trig["event_action"] == "trigger" and trig["payload"]["severity"] == "critical"
    assert res["event_action"] == "resolve" and res["dedup_key"] == trig["dedup_key"] == "fp00003" + "a" * 11


async def test_webhook_posts_an_alertmanager_v4_payload(monkeypatch, clock, spool):
    with FakeWebhook(clock, token="hook-bearer-token") as fake:
        monkeypatch.setenv("WH_URL", fake.base + "/alerts")
        monkeypatch.setenv("WH_TOKEN", "hook-bearer-token")
        r = Receiver(name="wh", webhook={"url": {"env": "WH_URL"}, "bearer_token": {"env": "WH_TOKEN"}})
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note("wh", 4))
        finally:
            await d.aclose()
    assert out.status == "delivered"
    body = fake.accepted[0].json
    assert body["status"] == "firing" and body["alerts"][0]["labels"]["alertname"] == "gpu_mem_leak"
    assert body["alerts"][0]["endsAt"] == "0001-01-01T00:00:00Z"


async def test_email_over_smtp(clock, spool):
    with FakeSmtp() as smtp:
        r = Receiver(name="mail", email={"to": ["oncall@example.org"], "from": "gpuwarden@example.org",
                                         "host": "127.0.0.1", "port": smtp.port})
        d = Delivery([r], spool=spool, language="zh-CN", clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note("mail", 5, tier=Tier.CRITICAL))
        finally:
            await d.aclose()
    assert out.status == "delivered"
    (msg,) = smtp.messages
    assert msg["To"] == "oncall@example.org" and "严重" in str(msg["Subject"]) or "=?utf-8?" in msg["Subject"]
    (text,) = [p for p in msg.walk() if p.get_content_type() == "text/plain"]  # and an HTML alternative
    assert "建议操作" in text.get_payload(decode=True).decode()


async def test_smtp_down_spools(clock, spool):
    from tests.fakes.smtp import _free_port

    r = Receiver(name="mail", email={"to": ["a@example.org"], "from": "g@example.org", "port": _free_port(),
                                     "timeout_s": 2})
    d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep, max_attempts=2)
    try:
        out = await d.deliver(note("mail", 6))
    finally:
        await d.aclose()
    assert out.status == "spooled" and d.pending("mail") == 1


async def test_a_queued_pagerduty_ack_is_sent_as_acknowledge_not_merged_into_a_digest(monkeypatch, clock, spool):
    from dataclasses import replace

    with FakePagerDuty(clock) as fake:
        fake.down_until = clock() + 120
        monkeypatch.setenv("PD_KEY", "R0UT1NGKEY0123456789abcdefABCDEF")
        r = Receiver(name="pd", pagerduty={"routing_key": {"env": "PD_KEY"}, "url": fake.base + "/v2/enqueue"})
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep, max_attempts=2)
        try:
            trigger = note("pd", 3, tier=Tier.CRITICAL)
            ack = replace(trigger, reason="ack", group_key="ack/g3", id="n3-ack")
            outs = [await d.deliver(trigger), await d.deliver(ack)]
            await d.wait_idle()
        finally:
            await d.aclose()
    assert [o.status for o in outs] == ["spooled", "spooled"]
    assert [(q.json["event_action"], q.json["dedup_key"]) for q in fake.accepted] == [
        ("trigger", "fp00003" + "a" * 11), ("acknowledge", "fp00003" + "a" * 11)]


async def test_past_a_burst_of_half_the_limit_sends_are_spread_over_the_window(monkeypatch, clock, spool):
    """DingTalk 20/min: 10 at once, then the free slots spread out (each a digest of what waited),
    never a window-long silence after a burst that spent the whole minute."""
    with FakeDingTalk(clock) as fake:
        r = dingtalk_receiver(monkeypatch, fake, None)
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            for i in range(240):
                await d.deliver(note("dt", i))
                await clock.sleep(0.25)  # 4 a second for a minute
            await d.wait_idle()
        finally:
            await d.aclose()
    at = [q.at for q in fake.accepted]
    gaps = [b - a for a, b in zip(at, at[1:])]
    assert len(at) >= 20 and at[9] - at[0] < 3.0  # the burst
    assert min(gaps[10:]) >= 3.0 - 1e-6 and max(gaps) < 10.0, gaps
    assert max_in_window(at, 60.0) <= 20 and fake.requests == fake.accepted


async def test_retries_back_off_exponentially_on_the_simulated_clock(monkeypatch, clock, spool):
    """Server errors in a row: the waits double (1, 2, 4 s at full jitter), so a receiver that is down
    is not hammered; a constant backoff fails here (scripts/mutation-check)."""
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SLACK_URL", fake.base + fake.path)
        fake.script.extend([(503, {}, b"unavailable")] * 3)
        d = Delivery([Receiver(name="sl", slack={"url": {"env": "SLACK_URL"}})], spool=spool,
                     clock=clock, sleep=clock.sleep, rng=lambda: 1.0, backoff_s=1.0, max_attempts=4)
        try:
            out = await d.deliver(note("sl", 1))
        finally:
            await d.aclose()
    assert out.status == "delivered" and out.attempts == 4
    at = [q.at for q in fake.requests]
    assert [round(b - a, 1) for a, b in zip(at, at[1:])] == [1.0, 2.0, 4.0]


async def test_after_a_3_minute_outage_what_queued_goes_out_as_one_digest_within_60_s(monkeypatch, clock, spool):
    """Feishu answers 503 for 3 minutes while 30 notifications arrive: it is probed at least once a
    minute, and everything goes out as one digest within 60 s of its return (simulated clock: the
    bound is on the platform's own timestamps, not on how long the test runs)."""
    with FakeFeishu(clock) as fake:
        fake.down_until = clock() + 180
        d = Delivery([feishu_receiver(monkeypatch, fake, None)], spool=spool, clock=clock, sleep=clock.sleep,
                     rng=random.Random(31).random)
        try:
            statuses = []
            for i in range(30):
                statuses.append((await d.deliver(note("fs", i))).status)
                await clock.sleep(3)
            await d.wait_idle()
        finally:
            await d.aclose()
    assert statuses == ["spooled"] * 30
    at = [q.at for q in fake.requests]
    assert max(b - a for a, b in zip(at, at[1:])) <= PROBE_S  # probed at least once a minute
    (sent,) = fake.accepted
    assert fake.down_until <= sent.at <= fake.down_until + 60
    content = sent.json["card"]["elements"][0]["text"]["content"]
    assert FP.findall(content) == [f"fp{i:05d}" for i in range(30)] and d.pending("fs") == 0


async def test_retry_after_beyond_the_probe_step_wins(monkeypatch, clock, spool):
    """Slack says Retry-After: 150 while messages wait: no probe comes before it, though probes are
    otherwise at most 60 s apart."""
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SLACK_URL", fake.base + fake.path)
        fake.script.extend([(503, {}, b"unavailable")] * 4 + [(429, {"Retry-After": "150"}, b"rate_limited")])
        d = Delivery([Receiver(name="sl", slack={"url": {"env": "SLACK_URL"}})], spool=spool,
                     clock=clock, sleep=clock.sleep, rng=lambda: 1.0)
        try:
            assert (await d.deliver(note("sl", 1))).status == "spooled"  # 4 attempts, then queued
            await d.wait_idle()
        finally:
            await d.aclose()
    at = [q.at for q in fake.requests]
    assert [q.answer[0] for q in fake.requests] == [503] * 4 + [429, 200]
    assert at[5] - at[4] >= 150 and at[4] - at[3] <= PROBE_S
