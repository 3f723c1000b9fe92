"""``gpuwarden notify`` on the real broker, delivering to fake Feishu bots over real sockets.

Transitions are produced to ``alerts``; a silence and an ack are written by the
CLI through the ``control`` topic; each fake bot must receive exactly the
expected messages: no silenced alert, no duplicate, no escalation after the ack.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwarden.app.cli import main
from gpuwarden.app.settings import load_settings
from gpuwarden.contract import AlertTransition, DeadLetter, Topics, decode, encode
from gpuwarden.notifiers.worker import Stats, run_notify
from tests.fakes.http import FakeFeishu
from tests.hang import HANG_S
from tests.kafka_support import consume_all, create_topic, produce, unique_topic

pytestmark = pytest.mark.kafka

SECRET = "feishu-signing-secret-for-team"
FP = re.compile(r"(?m)[·)] (fp-[a-z0-9]+)$")  # an alert's ids line ends with its fingerprint (plain_text: no code marks)


def transition(fp: str, tier: str, node: str, *, state: str = "firing", started: float, **labels: str) -> bytes:
    now = time.time()
    return encode(AlertTransition(
        fingerprint=fp, rule="xid_48" if tier == "critical" else "mem_leak", tier=tier, state=state,
        labels={"node": node, **labels}, started_at=started, ended_at=None if state == "firing" else now,
        ts=started if state == "firing" else now, summary=f"summary of {fp}"))


def messages(fake: FakeFeishu) -> list[tuple[str, tuple[str, ...], str]]:
    """(title state word, fingerprints, body) of every message the bot accepted."""
    out = []
    for rec in fake.accepted:
        card = rec.json["card"]
        body = "\n".join(el["text"]["content"] for el in card["elements"])  # the text, then the mentions
        state = "resolved" if "resolved:" in card["header"]["title"]["content"] else "firing"
        out.append((state, tuple(FP.findall(body)), body))
    return out


async def wait_for(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


def write_config(tmp_path: Path, bootstrap: str, prefix: str) -> Path:
    now = time.time()
    feishu = [{"name": n, "feishu": {"url": {"env": f"GW_TEST_URL_{n.upper()}"},
                                     **({"secret": {"env": "GW_TEST_FEISHU_SECRET"}} if n == "team" else {})}}
              for n in ("team", "pager", "lead")]
    cfg = {
        "kafka": {"bootstrap": bootstrap, "topic_prefix": prefix},
        "spool": {"path": str(tmp_path / "spool.db")},
        "notify": {
            "control": "kafka", "consumer_group": f"notify-{prefix}", "tick_interval": "200ms",
            "receivers": feishu, "team": "team",
            "route": {"receiver": "@owner", "group_by": ["rule", "node"], "group_wait": "1s",
                      "group_interval": "2s", "repeat_interval": "1h",
                      "routes": [{"matchers": ["tier=critical"], "receivers": ["@oncall", "@team"],
                                  "group_by": ["..."], "group_wait": "0s", "group_interval": "1s",
                                  "mention_oncall": True}]},
            "schedules": {"primary": {"rotation": "daily", "start": now - 3600, "users": ["ann", "ben"]}},
            "escalation": [{"after": "0s", "receivers": ["pager"], "schedule": "primary"},
                           {"after": "4s", "receivers": ["lead"]}],
        },
    }
    p = tmp_path / "gpuwarden.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


async def test_alerts_from_kafka_reach_feishu_with_silence_ack_dedup_and_dlq(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    prefix = unique_topic("nk") + "."
    topics = Topics(prefix)
    with FakeFeishu(secret=SECRET) as team, FakeFeishu() as pager, FakeFeishu() as lead:
        for name, fake in (("TEAM", team), ("PAGER", pager), ("LEAD", lead)):
            monkeypatch.setenv(f"GW_TEST_URL_{name}", fake.base + fake.hook)
        monkeypatch.setenv("GW_TEST_FEISHU_SECRET", SECRET)
        cfg = write_config(tmp_path, kafka_bootstrap, prefix)
        settings = load_settings(cfg)
        await create_topic(kafka_bootstrap, topics.alerts, partitions=2)

        assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "add", "node=node-09"]) == 0
        t0 = time.time()
        x = transition("fp-x", "critical", "node-01", started=t0)
        await produce(kafka_bootstrap, topics.alerts, [
            (b"fp-x", x),
            (b"fp-s", transition("fp-s", "critical", "node-09", started=t0)),       # silenced
            (b"fp-y", transition("fp-y", "critical", "node-03", started=t0)),
            (b"fp-a", transition("fp-a", "attention", "node-02", started=t0, user="carl")),
            (b"fp-x", x),                                                            # redelivered
            (b"bad", b'{"schema": "alert/1", "fingerprint": 7}'),                    # → alerts.dlq
        ])

        stop, stats = asyncio.Event(), Stats()
        worker = asyncio.create_task(run_notify(settings, stop=stop, stats=stats))
        try:
            await wait_for(lambda: len(pager.accepted) >= 2 and len(team.accepted) >= 3, HANG_S, "first pages")
            assert await asyncio.to_thread(main, ["ack", "--config", str(cfg), "fp-x", "--by", "ann"]) == 0
            await wait_for(lambda: len(lead.accepted) >= 1, HANG_S, "escalation of fp-y")
            await asyncio.sleep(1.5)  # fp-x was paged at the same moment; its escalation would be due now
            await produce(kafka_bootstrap, topics.alerts, [
                (b"fp-x", transition("fp-x", "critical", "node-01", state="resolved", started=t0))])
            await wait_for(lambda: len(pager.accepted) >= 3 and len(team.accepted) >= 4, HANG_S, "resolved")
            await asyncio.sleep(1.0)  # anything extra would arrive by now
        finally:
            stop.set()
            await asyncio.wait_for(worker, HANG_S)

    got = {name: sorted((s, fps) for s, fps, _ in messages(f)) for name, f in
           (("team", team), ("pager", pager), ("lead", lead))}
    assert got == {
        "pager": [("firing", ("fp-x",)), ("firing", ("fp-y",)), ("resolved", ("fp-x",))],
        "team": [("firing", ("fp-a",)), ("firing", ("fp-x",)), ("firing", ("fp-y",)), ("resolved", ("fp-x",))],
        "lead": [("firing", ("fp-y",))],
    }
    assert all("<at id=ann></at>" in body for s, fps, body in messages(pager) if s == "firing")
    assert "Escalation level 1" in messages(lead)[0][2]
    assert stats.consumed == 7 and stats.dead_letters == 1
    assert all(r.json.get("sign") for r in team.requests)  # the team bot checks signatures
    dlq = await consume_all(kafka_bootstrap, topics.dlq(topics.alerts), 1)
    dead = decode(dlq[0].value, DeadLetter)
    assert dead.topic == topics.alerts and "fingerprint" in dead.error

    assert await asyncio.to_thread(main, ["notify", "--config", str(cfg), "--log", "100"]) == 0
    log = capsys.readouterr().out
    assert len(re.findall(r" delivered +attempts=1 ", log)) == 8 and "fp-y" in log
    assert SECRET not in log and "feishu-hook-id-secret" not in log


async def test_oversized_malformed_alerts_are_dead_lettered_bounded_and_the_worker_goes_on(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 900 kB truncated record's letter (1.2 MB in base64) was over the producer's 1 MB default:
    the send raised out of the notify worker. Now both letters are bounded and sent, and the
    next alert is still handled."""
    import base64
    import hashlib
    import json
    import random

    prefix = unique_topic("nkp") + "."
    topics = Topics(prefix)
    noise = base64.b64encode(random.Random(5).randbytes(4 << 20))
    big, huge = b'{"schema": "alert/1", "summary": "' + noise[:900_000], b'{"x": "' + noise + noise[:1 << 20] + b'"}'
    with FakeFeishu() as team, FakeFeishu() as pager, FakeFeishu() as lead:
        for name, fake in (("TEAM", team), ("PAGER", pager), ("LEAD", lead)):
            monkeypatch.setenv(f"GW_TEST_URL_{name}", fake.base + fake.hook)
        monkeypatch.setenv("GW_TEST_FEISHU_SECRET", SECRET)
        settings = load_settings(write_config(tmp_path, kafka_bootstrap, prefix))
        await create_topic(kafka_bootstrap, topics.alerts, partitions=1, config={"max.message.bytes": str(8 << 20)})
        await produce(kafka_bootstrap, topics.alerts, [(b"big", big), (b"huge", huge)], max_request_size=8 << 20)
        await produce(kafka_bootstrap, topics.alerts, [
            (b"fp-ok", transition("fp-ok", "critical", "node-01", started=time.time()))])
        stop, stats = asyncio.Event(), Stats()
        worker = asyncio.create_task(run_notify(settings, stop=stop, stats=stats))
        try:
            await wait_for(lambda: stats.consumed >= 3 or worker.done(), HANG_S, "three records")
            await wait_for(lambda: len(pager.accepted) >= 1 or worker.done(), HANG_S, "the page after them")
        finally:
            stop.set()
            await asyncio.wait_for(worker, HANG_S)  # raises what the worker raised
    assert stats.dead_letters == 2 and stats.unsent is not None and stats.unsent.count == 0
    # The DLQ has the alerts topic's partition count (ensured by the worker), so the two letters may arrive from
    # different partitions in any order: put them back in source-offset order.
    letters = sorted((json.loads(r.value) for r in await consume_all(kafka_bootstrap, topics.dlq(topics.alerts), 2)),
                     key=lambda d: d["offset"])
    for raw, d in zip((big, huge), letters):
        assert d["value_sha256"] == hashlib.sha256(raw).hexdigest() and d["value_bytes"] == len(raw)
    assert not letters[0]["truncated"] and base64.b64decode(letters[0]["value_b64"]) == big
    assert letters[1]["truncated"] and len(base64.b64decode(letters[1]["value_b64"])) == 64 << 10
