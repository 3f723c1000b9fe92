"""``gpuwarden notify`` on Kafka serves Alertmanager's webhook beside the ``alerts`` topic.

Both sources go through the one router: an Alertmanager alert posted again (as
Alertmanager does at every group_interval and repeat_interval) is notified once,
a ``gpuwarden silence`` mutes Alertmanager's alerts like gpuwarden's own, and the
resolve closes what was notified.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import httpx
import pytest

from gpuwarden.app.cli import main
from gpuwarden.app.settings import load_settings
from gpuwarden.contract import Topics
from gpuwarden.notifiers.worker import Stats, run_notify
from tests.fakes.http import FakeFeishu
from tests.kafka_support import create_topic, produce, unique_topic
from tests.notifiers.test_notify_kafka import HANG_S, transition, wait_for, write_config

pytestmark = pytest.mark.kafka

FIRING = (Path(__file__).resolve().parent.parent / "fixtures" / "alertmanager" / "am-0.25.0-webhook-firing.json")


def am_payload(node: str, fingerprint: str, *, resolved: bool = False) -> dict:
    """The captured Alertmanager body, for another node and fingerprint (or its resolve)."""
    msg = json.loads(FIRING.read_text())
    a = msg["alerts"][0]
    a["labels"]["node"] = node
    a["fingerprint"] = fingerprint
    if resolved:
        a["status"] = msg["status"] = "resolved"
        a["endsAt"] = "2026-12-01T11:30:21Z"
    return msg


async def test_the_webhook_and_kafka_share_one_router(kafka_bootstrap: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    prefix = unique_topic("amk") + "."
    topics = Topics(prefix)
    with FakeFeishu() as team, FakeFeishu() as pager, FakeFeishu() as lead:
        for name, fake in (("TEAM", team), ("PAGER", pager), ("LEAD", lead)):
            monkeypatch.setenv(f"GW_TEST_URL_{name}", fake.base + fake.hook)
        monkeypatch.setenv("GW_TEST_FEISHU_SECRET", "team-bot-secret")  # the team bot signs; unchecked here
        cfg = write_config(tmp_path, kafka_bootstrap, prefix)
        text = cfg.read_text().replace("notify:\n", "notify:\n  alertmanager_webhook: {port: 0}\n", 1)
        cfg.write_text(text.replace("control: kafka", "control: spool"))
        settings = load_settings(cfg)
        await create_topic(kafka_bootstrap, topics.alerts, partitions=1)
        assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "add", "node=gpu-09"]) == 0
        await produce(kafka_bootstrap, topics.alerts, [
            (b"fp-k", transition("fp-k", "critical", "node-01", started=time.time()))])

        stop, stats = asyncio.Event(), Stats()
        worker = asyncio.create_task(run_notify(settings, stop=stop, stats=stats))
        try:
            printed = ""

            def url() -> str | None:
                nonlocal printed
                printed += capsys.readouterr().err
                m = re.search(r"Alertmanager webhook at (\S+)", printed)
                return m.group(1) if m else None

            await wait_for(lambda: url() or worker.done(), HANG_S, "the webhook's address")
            hook = url()
            async with httpx.AsyncClient() as client:
                for body in (am_payload("gpu-07", "c77244967ba00f9a"), am_payload("gpu-07", "c77244967ba00f9a"),
                             am_payload("gpu-09", "0d0d0d0d0d0d0d0d")):  # again (a repeat), and a silenced one
                    assert (await client.post(hook, json=body)).status_code == 200
                await wait_for(lambda: len(pager.accepted) >= 2, HANG_S, "the Kafka alert and the Alertmanager alert")
                resolved = am_payload("gpu-07", "c77244967ba00f9a", resolved=True)
                assert (await client.post(hook, json=resolved)).status_code == 200
                await wait_for(lambda: len(pager.accepted) >= 3, HANG_S, "the resolve")
            await asyncio.sleep(1.0)  # anything extra would arrive by now
        finally:
            stop.set()
            await asyncio.wait_for(worker, HANG_S)

    titles = [r.json["card"]["header"]["title"]["content"] for r in pager.accepted]
    bodies = [r.json["card"]["elements"][0]["text"]["content"] for r in pager.accepted]
    assert len(titles) == 3, titles
    assert sum("am-c77244967ba0" in b for b in bodies) == 2  # fired once (not twice), resolved once
    assert not [b for b in bodies if "am-0d0d0d0d" in b]  # silenced
    assert "resolved" in titles[-1] and "am-c77244967ba0" in bodies[-1]
    assert stats.consumed == 1 and stats.from_alertmanager == 4
