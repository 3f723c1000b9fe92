"""No secret value appears in logs, output, outcomes or the delivery log of a full run."""

from __future__ import annotations

import logging

from gpuwarden.spool import Spool
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.redact import Redactor
from tests.fakes.alerts import note
from tests.fakes.clock import SimClock
from tests.fakes.http import FakeDingTalk, FakeFeishu, FakeSlack


def test_redactor_masks_values_and_url_tokens():
    r = Redactor(["s3cr3t-value"])
    assert r("x s3cr3t-value y") == "x *** y"
    assert r("https://oapi.dingtalk.com/robot/send?access_token=abc123&timestamp=1") == \
        "https://oapi.dingtalk.com/robot/send?access_token=***&timestamp=1"
    assert r("https://hooks.slack.com/services/T1/B2/XYZ") == "https://hooks.slack.com/services/***"
    r.add(["a+b/c=d"])
    assert r("sign=a%2Bb%2Fc%3Dd&x=a+b/c=d") == "sign=***&x=***"


async def test_full_run_leaks_no_secret(monkeypatch, tmp_path, caplog, capsys):
    caplog.set_level(logging.DEBUG)
    clock = SimClock()
    secrets = {"FS_SECRET": "feishu-sign-secret-123", "DT_SECRET": "SECdingtalk-sign-secret-456"}
    with FakeFeishu(clock, secret="not-the-configured-one") as fs, FakeDingTalk(clock, secret=secrets["DT_SECRET"]) as dt, \
            FakeSlack(clock) as sl, Spool(tmp_path / "s.db") as spool:
        env = {**secrets, "FS_URL": fs.base + fs.hook, "DT_URL": f"{dt.base}/robot/send?access_token={dt.token}",
               "SL_URL": sl.base + sl.path, "DOWN_URL": "http://127.0.0.1:9/robot/send?access_token=down-token-789"}
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        sl.down_until = clock() + 30
        receivers = [
            Receiver(name="fs", feishu={"url": {"env": "FS_URL"}, "secret": {"env": "FS_SECRET"}}, fallback=["dt"]),
            Receiver(name="dt", dingtalk={"url": {"env": "DT_URL"}, "secret": {"env": "DT_SECRET"}}),
            Receiver(name="sl", slack={"url": {"env": "SL_URL"}}),
            Receiver(name="down", dingtalk={"url": {"env": "DOWN_URL"}}),
        ]
        d = Delivery(receivers, spool=spool, clock=clock, sleep=clock.sleep, max_attempts=2)
        try:
            outcomes = []
            for i, name in enumerate(["fs", "dt", "sl", "down"] * 3):
                outcomes.append(await d.deliver(note(name, i)))
                await clock.settle()  # the workers send what waits (the meta alert about fs) before the next
            d.drain()
        finally:
            await d.aclose()
        log_entries = d.log.read(1000)
    assert {o.status for o in outcomes} >= {"fallback", "delivered", "spooled"}  # all paths ran
    captured = capsys.readouterr()
    haystack = "\n".join([caplog.text, captured.out, captured.err, repr(outcomes), repr(log_entries)])
    assert "HTTP Request: POST ***" in caplog.text  # httpx logged the request URLs, masked
    assert "retry" in caplog.text.lower() or "failing" in caplog.text.lower()  # logs did say things
    leaked = [name for name, value in env.items() if value in haystack and name not in ("FS_URL", "SL_URL", "DT_URL")]
    tokens = [t for t in ("feishu-hook-id-secret", "dingtalk-access-token-secret", "XXXXSECRETSLACK",
                          "down-token-789", *secrets.values()) if t in haystack]
    assert leaked == [] and tokens == []
