"""The real Notifier and Delivery on event time, in front of loopback fakes (shared by the reliability tests)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from gpuwarden.app.settings import validate_settings
from gpuwarden.spool import Spool
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.pipeline import Notifier
from tests.fakes.clock import SimClock
from tests.fakes.http import FakeFeishu, FakeWebhook


async def notify(trs: list, tmp_path: Path, monkeypatch, down_s: float | None = None,
                 ) -> tuple[Counter, Counter, int, int]:
    """Deliver ``trs`` on their event time to a fake AM webhook (the owner/pager) and Feishu (the team).

    Returns the alerts notified on the webhook per (fingerprint, status, startsAt), the Feishu
    cards, how many requests the fakes refused (down for ``down_s`` after the first transition)
    and how many notifications were still queued at the end.
    """
    clock = SimClock(trs[0].ts)
    with FakeWebhook(clock) as wh, FakeFeishu(clock) as fs, Spool(tmp_path / f"spool-{down_s}.db") as spool:
        if down_s:
            wh.down_until = fs.down_until = trs[0].ts + down_s
        monkeypatch.setenv("URL_WH", wh.base + "/alerts")
        monkeypatch.setenv("URL_FS", fs.base + fs.hook)
        settings = validate_settings({"notify": {
            "receivers": [{"name": "wh", "webhook": {"url": {"env": "URL_WH"}}},
                          {"name": "chat", "feishu": {"url": {"env": "URL_FS"}}}],
            "team": "chat", "owners": {"default": "wh"}, "escalation": [{"receivers": ["wh"]}]}})
        delivery = Delivery(settings.notify.receivers, spool=spool, clock=clock, sleep=clock.sleep, max_attempts=2)
        notifier = Notifier(settings, spool=spool, clock=clock, delivery=delivery)
        try:
            for t in trs:
                clock.t = max(clock.t, t.ts)
                await notifier.handle(t)
                await notifier.tick(clock.t)
                await clock.settle()
            end = clock.t + 2 * 3600
            while clock.t < end:
                clock.t += 30
                await notifier.tick(clock.t)
                await clock.settle()
            await delivery.wait_idle()
            pending = delivery.pending("wh") + delivery.pending("chat")
        finally:
            await notifier.aclose()
        alerts = Counter((a["fingerprint"], a["status"], a["startsAt"])
                         for r in wh.accepted for a in r.json["alerts"])
        cards = Counter(json.dumps(r.json["card"], sort_keys=True) for r in fs.accepted)
        failed = sum(1 for r in wh.requests + fs.requests if r.answer[0] == 503)
    return alerts, cards, failed, pending
