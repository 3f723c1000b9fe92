"""A rotated secret: re-read after a refused signature and on SIGHUP, retried once; still refused,
the message goes to the fallback and a meta alert about the receiver goes to the others until it
accepts again. The fakes refuse as their platforms document (Feishu code 19021 "sign match fail",
DingTalk errcode 310000 "sign not match": docs/notifiers.md, /work/shared reference table)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

from gpuwarden.notifiers import refusals
from gpuwarden.notifiers.delivery import Delivery, reread_on_sighup
from gpuwarden.notifiers.receivers import Receiver
from tests.fakes.alerts import FP, note
from tests.fakes.http import Answer, FakeDingTalk, FakeFeishu, FakePagerDuty, FakeSlack, FakeWebhook, Received

OLD, NEW = "feishu-secret-before-rotation", "feishu-secret-after-rotation"


class RotatedWhileRefusing(FakeFeishu):
    """Feishu with the new secret; the operator writes it into our secret file as the first refusal
    goes out (so the re-read after the refusal finds it)."""

    def __init__(self, clock, secret_file: Path) -> None:
        super().__init__(clock, secret=NEW)
        self.secret_file = secret_file

    def handle(self, rec: Received) -> Answer:
        answer = super().handle(rec)
        if b"19021" in answer[2]:
            self.secret_file.write_text(NEW)
        return answer


def receivers(monkeypatch, feishu: FakeFeishu, secret_file: Path, slack: FakeSlack, hook: FakeWebhook) -> list[Receiver]:
    monkeypatch.setenv("FS_URL", feishu.base + feishu.hook)
    monkeypatch.setenv("SL_URL", slack.base + slack.path)
    monkeypatch.setenv("WH_URL", hook.base + "/alerts")
    return [Receiver(name="team-a", feishu={"url": {"env": "FS_URL"}, "secret": {"file": str(secret_file)}},
                     fallback=["backup"]),
            Receiver(name="backup", slack={"url": {"env": "SL_URL"}}),
            Receiver(name="ops", webhook={"url": {"env": "WH_URL"}})]


def refusing(d: Delivery) -> float | None:
    """The meta alert's gauge as /metrics shows it."""
    return d.metrics.registry.get_sample_value("gpuwarden_notify_receiver_refusing", {"receiver": "team-a"})


def no_secret_in(texts: list[str]) -> None:
    for text in texts:
        assert OLD not in text and NEW not in text and "feishu-hook-id-secret" not in text


async def test_a_secret_rotated_while_refusing_is_reread_and_the_message_retried_once(
        monkeypatch, tmp_path, clock, spool, caplog):
    caplog.set_level(logging.INFO)
    secret = tmp_path / "feishu.secret"
    secret.write_text(OLD)
    with RotatedWhileRefusing(clock, secret) as fs, FakeSlack(clock) as sl, FakeWebhook(clock) as wh:
        d = Delivery(receivers(monkeypatch, fs, secret, sl, wh), spool=spool, clock=clock, sleep=clock.sleep)
        try:
            out = await d.deliver(note("team-a", 1))
            await d.wait_idle()
        finally:
            await d.aclose()
    assert (out.status, out.attempts) == ("delivered", 2)
    assert [q.json.get("code") for q in fs.requests] == [None, None] and len(fs.accepted) == 1
    assert sl.requests == [] and wh.requests == [] and d.refusing == {}  # no fallback, no meta alert
    no_secret_in([caplog.text, *(e["detail"] for e in d.log.read(100))])


async def test_still_refused_goes_to_the_fallback_and_raises_a_meta_alert_until_it_accepts_again(
        monkeypatch, tmp_path, clock, spool, caplog):
    caplog.set_level(logging.INFO)
    secret = tmp_path / "feishu.secret"
    secret.write_text(OLD)
    with FakeFeishu(clock, secret=NEW) as fs, FakeSlack(clock) as sl, FakeWebhook(clock) as wh, \
            FakePagerDuty(clock) as pd:
        monkeypatch.setenv("PD_KEY", "k" * 32)
        oncall = Receiver(name="oncall", pagerduty={"routing_key": {"env": "PD_KEY"}, "url": pd.base + "/v2/enqueue"})
        d = Delivery([*receivers(monkeypatch, fs, secret, sl, wh), oncall], spool=spool, clock=clock,
                     sleep=clock.sleep, timezone="Asia/Shanghai")
        try:
            out = await d.deliver(note("team-a", 1))
            await d.wait_idle()
            refused = dict(d.refusing)
            scraped = refusing(d)
            secret.write_text(NEW)
            assert d.reread_secrets() == ["team-a"]  # what SIGHUP does
            await clock.sleep(60)
            back = await d.deliver(note("team-a", 2))
            await d.wait_idle()
        finally:
            await d.aclose()
    assert out.status == "fallback" and "delivered via backup" in out.detail
    assert len(fs.requests) == 2 and len(fs.accepted) == 1  # refused once (secret unchanged: no retry), then ok
    assert FP.findall(sl.accepted[0].json["text"]) == ["fp00001"]  # the message, via the fallback
    assert scraped == 1.0 and list(refused) == ["team-a"]
    firing, resolved = (q.json["alerts"][0] for q in wh.accepted)
    since = refused["team-a"].since
    hhmm = datetime.fromtimestamp(since, ZoneInfo("Asia/Shanghai"))
    assert firing["annotations"]["summary"] == (
        "Feishu room team-a refuses our messages: sign match fail or timestamp is not within one hour "
        f"from current time (19021) since {hhmm:%H:%M}")
    assert firing["labels"]["alertname"] == "receiver_refuses" and firing["labels"]["receiver"] == "team-a"
    assert (firing["status"], resolved["status"]) == ("firing", "resolved")
    assert [q for q in sl.accepted if "refuses our messages" in q.json["text"]]  # the fallback hears it too
    assert pd.requests == []  # an attention alert about a chat room pages no one
    assert (back.status, d.refusing, refusals.read_all(spool)) == ("delivered", {}, [])
    assert refusing(d) == 0.0
    no_secret_in([caplog.text, *(e["detail"] for e in d.log.read(100)), *(q.raw.decode() for q in wh.requests)])


async def test_dingtalk_env_secret_changed_is_retried_once(monkeypatch, clock, spool):
    """DingTalk 310000 (sign not match) with a rotated ``{env: …}`` secret: read again, retried once."""
    with FakeDingTalk(clock, secret="SECnew-dingtalk-secret") as dt:
        monkeypatch.setenv("DT_URL", f"{dt.base}/robot/send?access_token={dt.token}")
        monkeypatch.setenv("DT_SECRET", "SECold-dingtalk-secret")
        d = Delivery([Receiver(name="dt", dingtalk={"url": {"env": "DT_URL"}, "secret": {"env": "DT_SECRET"}})],
                     spool=spool, clock=clock, sleep=clock.sleep)
        real = dt.handle

        def rotate_on_refusal(rec: Received) -> Answer:
            answer = real(rec)
            if b"310000" in answer[2]:
                os.environ["DT_SECRET"] = "SECnew-dingtalk-secret"  # monkeypatch restores it
            return answer

        dt.handle = rotate_on_refusal
        try:
            out = await d.deliver(note("dt", 1))
        finally:
            await d.aclose()
    assert (out.status, out.attempts, len(dt.requests), len(dt.accepted)) == ("delivered", 2, 2, 1)


async def test_sighup_rereads_the_secrets():
    heard = asyncio.Event()
    assert reread_on_sighup(heard.set)
    try:
        os.kill(os.getpid(), signal.SIGHUP)
        await heard.wait()
    finally:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)


async def test_queued_messages_refused_after_an_outage_go_to_the_fallback(monkeypatch, tmp_path, clock, spool):
    """The queue's worker, not only ``deliver()``: what waited through an outage and is then refused
    goes to the fallback (it used to be marked failed), and the meta alert opens."""
    secret = tmp_path / "feishu.secret"
    secret.write_text(OLD)
    with FakeFeishu(clock, secret=NEW) as fs, FakeSlack(clock) as sl, FakeWebhook(clock) as wh:
        fs.down_until = clock() + 100
        d = Delivery(receivers(monkeypatch, fs, secret, sl, wh), spool=spool, clock=clock, sleep=clock.sleep,
                     max_attempts=8, rng=lambda: 1.0)  # 7 probes in the outage: still owned by team-a
        try:
            for i in (1, 2):
                d.submit(note("team-a", i))
            await d.wait_idle()
        finally:
            await d.aclose()
    assert {q.answer[0] for q in fs.requests if q.at < fs.down_until} == {503}  # probed through the outage
    assert b"19021" in fs.requests[-1].answer[2] and fs.accepted == []
    assert sorted(fp for q in sl.accepted for fp in FP.findall(q.json["text"])) == ["fp00001", "fp00002"]
    statuses = {e["notification_id"]: e["status"] for e in d.log.read(100) if e["receiver"] == "team-a"}
    assert statuses == {"n1": "fallback", "n2": "fallback"}
    assert list(d.refusing) == ["team-a"] and [q.json["alerts"][0]["status"] for q in wh.accepted] == ["firing"]


async def test_refused_messages_queue_at_a_busy_fallback_rather_than_fail(monkeypatch, tmp_path, clock, spool):
    """Slack's 1 message/s makes the fallback busy for the second of two refused messages in a row:
    it waits in the fallback's queue (never 'failed': team-a will not send it)."""
    secret = tmp_path / "feishu.secret"
    secret.write_text(OLD)
    with FakeFeishu(clock, secret=NEW) as fs, FakeSlack(clock) as sl, FakeWebhook(clock) as wh:
        d = Delivery(receivers(monkeypatch, fs, secret, sl, wh), spool=spool, clock=clock, sleep=clock.sleep)
        try:
            outs = [await d.deliver(note("team-a", i)) for i in (1, 2)]
            await d.wait_idle()
        finally:
            await d.aclose()
    assert [o.status for o in outs] == ["fallback", "fallback"] and outs[1].detail.endswith("queued for backup")
    assert sorted(fp for q in sl.accepted for fp in FP.findall(q.json["text"])) == ["fp00001", "fp00002"]
