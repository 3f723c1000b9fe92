"""The delivery model through the Notifier, against the documented platforms.

Per-receiver queues (a page never waits behind chat: real wall clock),
backoff that grows on the queued path, Retry-After honoured there, critical
first, and the resolve of whatever was sent, muted or not.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.app.settings import validate_settings
from gpuwarden.contract import AlertTransition, Matcher, Silence, Tier
from gpuwarden.spool import Spool
from gpuwarden.notifiers.control import write_spool
from gpuwarden.notifiers.delivery import PROBE_S, Delivery
from gpuwarden.notifiers.pipeline import Notifier
from tests.acceptance.platforms import Answer, Feishu, Hit, PagerDuty, Slack
from tests.fakes.alerts import note
from tests.fakes.clock import SimClock

T0 = 1_767_225_600.0


class EventClock:
    """The router's clock in ``gpuwarden run``: the records' time, which stands still between records."""

    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def settings(tmp: Path, monkeypatch: pytest.MonkeyPatch, chat: Any, pd: PagerDuty | None, **notify: Any) -> Any:
    monkeypatch.setenv("URL_CHAT", chat.url)
    kind = "slack" if isinstance(chat, Slack) else "feishu"
    receivers: list[dict] = [{"name": "chat", kind: {"url": {"env": "URL_CHAT"}}}]
    if pd is not None:
        monkeypatch.setenv("PD_KEY", pd.routing_key)
        receivers.append({"name": "pd", "pagerduty": {"routing_key": {"env": "PD_KEY"}, "url": pd.url}})
    return validate_settings({"spool": {"path": str(tmp / "spool.db")}, "notify": {
        "receivers": receivers, "team": "chat", "owners": {"default": "chat"},
        "escalation": [{"receivers": ["pd"]}] if pd is not None else [], **notify}})


def xid(gpu: int, ts: float, *, rule: str = "xid-hardware", state: str = "firing", started: float | None = None,
        node: str = "node-00") -> AlertTransition:
    return AlertTransition(fingerprint=f"{rule}-{node}-{gpu}", rule=rule, tier=Tier.CRITICAL, state=state,
                           labels={"node": node, "gpu": str(gpu)}, started_at=started or ts, ts=ts,
                           ended_at=ts if state == "resolved" else None, summary=f"{node} GPU {gpu}: {rule}")


async def test_pagerduty_gets_every_trigger_within_1s_while_slack_answers_429_retry_after_30(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real wall clock: the router on event time, delivery on the wall clock, as in ``gpuwarden run``."""
    with Slack() as slack, PagerDuty() as pd, Spool(tmp_path / "spool.db") as spool:
        slack.script.extend([(429, {"Content-Type": "text/html", "Retry-After": "30"}, b"rate_limited")] * 100)
        n = Notifier(settings(tmp_path, monkeypatch, slack, pd), spool=spool, clock=EventClock(T0))
        handed: dict[str, float] = {}
        try:
            async with asyncio.timeout(20):  # today: each handle() waits out Slack's Retry-After
                for gpu in range(8):
                    t = xid(gpu, T0 + gpu)
                    n.clock.t = t.ts
                    handed[t.fingerprint] = time.time()
                    await n.handle(t)
                    await n.tick()
                    await asyncio.sleep(0.2)
                while len(pd.accepted) < 8:
                    await asyncio.sleep(0.02)
        finally:
            await n.aclose()
    arrived = {h.json["dedup_key"]: h.at for h in pd.accepted if h.json["event_action"] == "trigger"}
    delays = {fp: arrived[fp] - handed[fp] for fp in handed}
    assert max(delays.values()) < 1.0, delays
    assert len(slack.hits) == 1  # one 429, then Slack's queue waits out Retry-After: 30


class Down(Feishu):
    """Feishu whose service answers 503 until ``up_at`` (its own clock)."""

    up_at = float("inf")

    def answer(self, hit: Hit) -> Answer:
        if hit.at < self.up_at:
            return 503, {"Content-Type": "text/plain"}, b"service unavailable"
        return super().answer(hit)


async def test_backoff_grows_on_the_queued_path_and_a_down_receiver_is_probed_not_hammered(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimClock(T0)
    with Down(clock=clock) as chat, Spool(tmp_path / "spool.db") as spool:
        chat.up_at = T0 + 900
        s = settings(tmp_path, monkeypatch, chat, None)
        d = Delivery(s.notify.receivers, spool=spool, clock=clock, sleep=clock.sleep, rng=lambda: 1.0)
        n = Notifier(s, spool=spool, clock=clock, delivery=d)
        try:
            for second in range(1500):  # 25 min, ticking every second as `gpuwarden notify` does
                if second < 60:
                    await n.handle(xid(second, clock.t))
                await n.tick(clock.t)
                await clock.settle()
                clock.t += 1
            left = d.pending("chat")
        finally:
            await n.aclose()
    during = [h.at - T0 for h in chat.hits if h.at < chat.up_at]
    gaps = [b - a for a, b in zip(during, during[1:])]
    assert len(during) <= 21, during  # probed: doubling up to a minute, then once a minute, not one per tick
    assert all(b >= 1.9 * a for a, b in zip(gaps, gaps[1:]) if b < PROBE_S), gaps  # doubling until the cap
    assert gaps and max(gaps) <= PROBE_S + 1  # at least once a minute while messages wait (#31)
    assert chat.accepted and left == 0  # and after the outage everything went out


async def test_retry_after_is_honoured_on_the_queued_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimClock(T0)
    with Slack(clock=clock) as slack, Spool(tmp_path / "spool.db") as spool:
        slack.script.extend([(200, {"Content-Type": "text/html"}, b"ok"),
                             (429, {"Content-Type": "text/html", "Retry-After": "10"}, b"rate_limited")])
        s = settings(tmp_path, monkeypatch, slack, None)
        d = Delivery(s.notify.receivers, spool=spool, clock=clock, sleep=clock.sleep)
        n = Notifier(s, spool=spool, clock=clock, delivery=d)
        try:
            for second in range(40):
                if second < 3:
                    await n.handle(xid(second, clock.t))  # the second waits for Slack's 1/s slot: queued
                await n.tick(clock.t)
                await clock.settle()
                clock.t += 1
        finally:
            await n.aclose()
    at = [h.at for h in slack.hits]
    assert slack.hits[1].answer[0] == 429
    assert at[2] - at[1] >= 10.0, at  # today: retried on the next tick
    assert len(slack.hits) == 3 and slack.hits[2].ok  # the rest merged into one digest


async def test_critical_goes_first_in_a_receivers_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimClock(T0)
    with PagerDuty(clock=clock) as pd:
        pd.script.append((500, {"Content-Type": "application/json"}, b'{"status":"error"}'))
        monkeypatch.setenv("PD_KEY", pd.routing_key)
        r = validate_settings({"notify": {"receivers": [
            {"name": "pd", "pagerduty": {"routing_key": {"env": "PD_KEY"}, "url": pd.url}}]}}).notify.receivers
        d = Delivery(r, spool=None, clock=clock, sleep=clock.sleep, rng=lambda: 1.0, max_attempts=1)
        try:
            assert (await d.deliver(note("pd", 0, tier=Tier.ATTENTION))).status == "spooled"  # 500: pd backs off
            for i in (1, 2, 3):
                await d.deliver(note("pd", i, tier=Tier.ATTENTION))
            await d.deliver(note("pd", 4, tier=Tier.CRITICAL))
            await d.wait_idle()
        finally:
            await d.aclose()
    order = [h.json["payload"]["severity"] for h in pd.hits[1:]]
    assert order[0] == "critical" and sorted(order[1:]) == ["warning"] * 4, order


@pytest.mark.parametrize("mute", ["inhibited", "silenced"])
async def test_a_muted_resolve_still_closes_the_pagerduty_incident_and_tells_chat(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mute: str) -> None:
    """XID 79: xid-hardware pages; gpu-lost then inhibits the node's GPU alerts (or a silence covers them)."""
    clock = SimClock(T0)
    with Feishu(clock=clock) as chat, PagerDuty(clock=clock) as pd, Spool(tmp_path / "spool.db") as spool:
        s = settings(tmp_path, monkeypatch, chat, pd)
        d = Delivery(s.notify.receivers, spool=spool, clock=clock, sleep=clock.sleep)
        n = Notifier(s, spool=spool, clock=clock, delivery=d)
        hw = xid(4, T0)
        try:
            for t, at in [(hw, T0), (xid(4, T0 + 1, rule="gpu-lost") if mute == "inhibited" else None, T0 + 1),
                          (xid(4, T0 + 600, state="resolved", started=T0), T0 + 600)]:
                clock.t = at
                if mute == "silenced" and at == T0 + 1:  # what `gpuwarden silence add node=node-00` writes
                    write_spool(spool, Silence(id="s1", matchers=[Matcher(label="node", value="node-00")],
                                               starts_at=T0, ends_at=T0 + 7200, created_by="ann"))
                if t is not None:
                    await n.handle(t)
                for _ in range(3):
                    clock.t += 1
                    await n.tick(clock.t)
                    await clock.settle()
                await d.wait_idle()
        finally:
            await n.aclose()
    actions = [(h.json["event_action"], h.json["dedup_key"]) for h in pd.accepted]
    assert ("trigger", hw.fingerprint) in actions and ("resolve", hw.fingerprint) in actions
    assert hw.fingerprint not in pd.open
    cards = [h.json["card"]["header"]["title"]["content"] for h in chat.accepted]
    assert any(c.startswith("[CRITICAL] resolved") for c in cards), cards
