"""Notifier pipeline with an event-time clock; control state written by the real CLI into the spool."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.app.cli import main
from gpuwarden.app.settings import validate_settings
from gpuwarden.contract import AlertTransition, Topics, decode
from gpuwarden.spool import Spool
from gpuwarden.notifiers.control import load_spool
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.pipeline import Notifier
from tests.notifiers.test_router import T0, alert, receivers


class Recorder:
    """Stands in for Delivery at the seam: records what the router hands over, in order."""

    def __init__(self) -> None:
        self.got: list[Notification] = []
        self.drains = 0
        self.closed = False

    def submit(self, n: Notification) -> None:
        self.got.append(n)

    def drain(self) -> int:
        self.drains += 1
        return 0

    async def aclose(self) -> None:
        self.closed = True


def settings(tmp_path: Path, **notify: Any) -> Any:
    data = {"spool": {"path": str(tmp_path / "spool.db")}, "notify": {
        "receivers": receivers("team-chat", "pager"), "team": "team-chat",
        "escalation": [{"receivers": ["pager"]}], **notify}}
    return validate_settings(data)


def write_config(tmp_path: Path) -> Path:
    import yaml

    p = tmp_path / "gpuwarden.yaml"
    p.write_text(yaml.safe_dump({"spool": {"path": str(tmp_path / "spool.db")}}))
    return p


class EventClock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_history_routing_and_timers_on_event_time(tmp_path: Path) -> None:
    s = settings(tmp_path)
    spool = Spool(s.spool.path)
    clock, rec = EventClock(T0), Recorder()
    n = Notifier(s, spool=spool, clock=clock, delivery=rec)
    await n.handle(alert("x", tier="critical"))
    await n.handle(alert("a"))
    assert sorted(x.receiver for x in rec.got) == ["pager", "team-chat"]
    clock.t = T0 + 30
    await n.tick()
    assert [(x.receiver, x.alerts[0].fingerprint) for x in rec.got[2:]] == [("team-chat", "a")]
    history = [decode(r.value, AlertTransition).fingerprint for r in spool.read(Topics().alerts)]
    assert history == ["x", "a"]
    await n.tick(T0 + 30.5)
    assert rec.drains == 1  # the spool is drained at most once per tick_interval (1 s) of the clock
    await n.tick(T0 + 31)
    assert rec.drains == 2
    await n.aclose()
    assert rec.closed
    spool.close()


async def test_cli_silence_and_ack_reach_a_running_notifier_through_the_spool(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The CLI stamps silences and acks with wall time, so this notifier runs live (wall-clock event time).
    now = float(int(time.time()))
    cfg = write_config(tmp_path)
    s = settings(tmp_path)
    spool = Spool(s.spool.path)
    clock, rec = EventClock(now), Recorder()
    n = Notifier(s, spool=spool, clock=clock, delivery=rec)

    assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "add", "node=node-07",
                                          "rule=~mem.*", "--for", "1h", "--by", "ops"]) == 0
    sid = capsys.readouterr().out.split()[0]
    assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "list"]) == 0
    listed = capsys.readouterr().out
    assert sid in listed and "node=node-07 rule=~mem.*" in listed and "by ops" in listed
    await n.tick(now)
    await n.handle(alert("m", node="node-07", started=now))
    await n.handle(alert("m2", node="node-08", started=now))
    clock.t = now + 30
    await n.tick()
    assert [x.alerts[0].labels["node"] for x in rec.got] == ["node-08"]

    assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "expire", sid]) == 0
    assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "expire", "nope"]) == 1
    assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "list"]) == 0
    assert sid not in capsys.readouterr().out.split("expired")[-1]

    clock.t = now + 330
    await n.tick()
    assert [x.alerts[0].fingerprint for x in rec.got] == ["m2", "m"]

    # ack stops the critical alert's repeat (critical repeat_interval 1h)
    await n.handle(alert("x", tier="critical", started=now))
    assert await asyncio.to_thread(main, ["ack", "--config", str(cfg), "x", "--by", "ann"]) == 0
    before = len(rec.got)
    clock.t = now + 330 + 3600
    await n.tick()
    assert [(x.receiver, x.reason) for x in rec.got[before:]] == [("pager", "ack"), ("team-chat", "ack")]  # no repeat
    before = len(rec.got)
    await n.handle(alert("y", tier="critical", started=now))  # an unacked one does repeat
    clock.t = now + 330 + 7200
    await n.tick()
    assert {(x.reason, x.alerts[0].fingerprint) for x in rec.got[before:]} == {("new", "y"), ("repeat", "y")}
    await n.aclose()
    spool.close()


async def test_a_restart_keeps_what_was_paged_and_the_escalation_in_progress(tmp_path: Path) -> None:
    s = settings(tmp_path, receivers=receivers("team-chat", "pager", "lead"),
                 escalation=[{"receivers": ["pager"]}, {"after": "15m", "receivers": ["lead"]}])
    spool = Spool(s.spool.path)
    clock, rec = EventClock(T0), Recorder()
    n = Notifier(s, spool=spool, clock=clock, delivery=rec)
    await n.handle(alert("x", tier="critical"))
    await n.handle(alert("y", tier="critical"))
    assert sorted((m.receiver, m.reason, m.alerts[0].fingerprint) for m in rec.got) == [
        ("pager", "new", "x"), ("pager", "new", "y"), ("team-chat", "new", "x"), ("team-chat", "new", "y")]
    clock.t = T0 + 60
    await n.tick()
    await n.aclose()                                   # `gpuwarden notify` stops here …

    rec = Recorder()                                   # … and a new process starts on the same spool
    n = Notifier(s, spool=spool, clock=clock, delivery=rec)
    clock.t = T0 + 100
    await n.handle(alert("x", tier="critical", state="resolved", ts=T0 + 100))
    await n.handle(alert("x", tier="critical"))        # a redelivery of the firing record: a repeat
    for t in (T0 + 120, T0 + 180, T0 + 899.9):
        clock.t = t
        await n.tick()
    assert sorted((m.receiver, m.reason, m.alerts[0].fingerprint, m.at) for m in rec.got) == [
        ("pager", "resolved", "x", T0 + 120), ("team-chat", "resolved", "x", T0 + 120)]
    clock.t = T0 + 900                                 # y's level 1 is due 15 min after its first page
    await n.tick()
    (esc,) = rec.got[2:]
    assert (esc.receiver, esc.reason, esc.alerts[0].fingerprint, esc.escalation_level, esc.at) == (
        "lead", "escalation", "y", 1, T0 + 900)
    clock.t = T0 + 1800
    await n.tick()
    assert len(rec.got) == 3
    await n.aclose()
    spool.close()


async def test_an_unreadable_router_state_is_logged_and_the_notifier_starts_empty(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from gpuwarden.notifiers.pipeline import STATE_KEY, STATE_NS

    s = settings(tmp_path)
    with Spool(s.spool.path) as spool:
        spool.kv_put(STATE_NS, STATE_KEY, b'{"version": 0}')
        rec = Recorder()
        n = Notifier(s, spool=spool, clock=EventClock(T0), delivery=rec)
        assert "router state not readable" in caplog.text
        await n.handle(alert("x", tier="critical"))
        assert len(rec.got) == 2
        await n.aclose()
        assert b'"version":1' in spool.kv_get(STATE_NS, STATE_KEY)


async def test_bad_silence_matcher_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    assert await asyncio.to_thread(main, ["silence", "--config", str(cfg), "add", "node~x"]) == 2
    assert "expected a matcher" in capsys.readouterr().err


async def test_test_notify_prints_each_receivers_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from tests.fakes.http import FakeFeishu

    with FakeFeishu(secret="right") as good, FakeFeishu(secret="right") as bad:
        monkeypatch.setenv("GW_T_GOOD", good.base + good.hook)
        monkeypatch.setenv("GW_T_BAD", bad.base + bad.hook)
        monkeypatch.setenv("GW_T_SECRET", "right")
        monkeypatch.setenv("GW_T_WRONG", "wrong")
        cfg = tmp_path / "gpuwarden.yaml"
        cfg.write_text(yaml.safe_dump({"spool": {"path": str(tmp_path / "spool.db")}, "notify": {"receivers": [
            {"name": "ok-bot", "feishu": {"url": {"env": "GW_T_GOOD"}, "secret": {"env": "GW_T_SECRET"}}},
            {"name": "bad-sign", "feishu": {"url": {"env": "GW_T_BAD"}, "secret": {"env": "GW_T_WRONG"}}},
        ]}}))
        assert await asyncio.to_thread(main, ["test-notify", "--config", str(cfg)]) == 1
        out = capsys.readouterr().out.splitlines()
        assert await asyncio.to_thread(main, ["test-notify", "--config", str(cfg), "--receiver", "ok-bot"]) == 0
        assert await asyncio.to_thread(main, ["test-notify", "--config", str(cfg), "--receiver", "nope"]) == 2
    assert out[0].split()[:3] == ["ok-bot", "feishu", "delivered"]
    assert out[1].split()[:3] == ["bad-sign", "feishu", "failed"] and "19021" in out[1]
    assert len(good.accepted) == 2 and bad.accepted == []


def test_silence_config_goes_before_or_after_the_action() -> None:
    from gpuwarden.app.cli import build_parser

    parse = build_parser().parse_args
    assert parse(["silence", "--config", "a.yaml", "add", "node=x"]).config == "a.yaml"
    assert parse(["silence", "add", "node=x", "--config", "b.yaml"]).config == "b.yaml"
    assert parse(["silence", "list", "--config", "b.yaml"]).config == "b.yaml"
    assert parse(["silence", "--config", "a.yaml", "expire", "id1"]).config == "a.yaml"
    assert parse(["silence", "--config", "a.yaml", "expire", "id1", "--config", "b.yaml"]).config == "b.yaml"
    assert parse(["silence", "list"]).config is None


async def test_silence_cli_with_config_after_the_action_writes_to_that_spool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    cfg = write_config(tmp_path)
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    monkeypatch.setenv("GPUWARDEN_CONFIG", str(write_config(decoy)))  # where an ignored --config would lead
    assert yaml.safe_load(cfg.read_text())["spool"]["path"] != yaml.safe_load(
        (decoy / "gpuwarden.yaml").read_text())["spool"]["path"]
    assert await asyncio.to_thread(main, ["silence", "add", "node=node-07", "--for", "1h", "--config", str(cfg)]) == 0
    sid = capsys.readouterr().out.split()[0]
    for argv in (["silence", "list", "--config", str(cfg)], ["silence", "--config", str(cfg), "list"]):
        assert await asyncio.to_thread(main, argv) == 0
        assert capsys.readouterr().out.split()[0] == sid
    assert await asyncio.to_thread(main, ["silence", "list"]) == 0  # $GPUWARDEN_CONFIG: the decoy spool
    assert capsys.readouterr().out == ""
    assert await asyncio.to_thread(main, ["silence", "expire", sid, "--config", str(cfg)]) == 0


async def test_ack_reaches_pagerduty_as_acknowledge_between_trigger_and_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuwarden.contract import Ack
    from gpuwarden.notifiers.control import write_spool
    from gpuwarden.notifiers.delivery import Delivery
    from tests.fakes.clock import SimClock
    from tests.fakes.http import FakeFeishu, FakePagerDuty

    clock = SimClock(T0)
    with FakePagerDuty(clock) as pd, FakeFeishu(clock) as chat, Spool(tmp_path / "spool.db") as spool:
        monkeypatch.setenv("PD_KEY", "R0UT1NGKEY0123456789abcdefABCDEF")
        monkeypatch.setenv("URL_TEAM_CHAT", chat.base + chat.hook)
        s = settings(tmp_path, receivers=[
            {"name": "pager", "pagerduty": {"routing_key": {"env": "PD_KEY"}, "url": pd.base + "/v2/enqueue"}},
            *receivers("team-chat")])
        d = Delivery(s.notify.receivers, spool=spool, clock=clock, sleep=clock.sleep)
        n = Notifier(s, spool=spool, clock=clock, delivery=d)
        try:
            await n.handle(alert("fp-x", tier="critical"))
            await d.wait_idle()
            write_spool(spool, Ack(fingerprint="fp-x", by="ann", at=T0 + 30))  # what `gpuwarden ack` writes
            clock.t = T0 + 31
            await n.tick()
            await d.wait_idle()
            clock.t = T0 + 100
            await n.handle(alert("fp-x", tier="critical", state="resolved", ts=T0 + 100))
            await d.wait_idle()
            for t in (T0 + 120, T0 + 300):
                clock.t = t
                await n.tick()
                await d.wait_idle()
            log = n.delivery.log.read(20)
        finally:
            await n.aclose()
    events = [(q.json["event_action"], q.json["dedup_key"]) for q in pd.accepted]
    assert events == [("trigger", "fp-x"), ("acknowledge", "fp-x"), ("resolve", "fp-x")]
    assert [q.at for q in pd.accepted] == [T0, T0 + 31, T0 + 100]  # the group flush was due (T0 + 60)
    assert len(chat.accepted) == 2  # firing and resolved; chat has no acknowledge message
    assert [e["detail"] for e in log if e["receiver"] == "team-chat" and e["attempts"] == 0] == [
        "not sent: feishu has no acknowledge message"]


async def test_test_notify_resolves_the_pagerduty_incident_it_opened(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    from tests.acceptance.platforms import PagerDuty

    with PagerDuty() as pd:
        monkeypatch.setenv("GW_PD_KEY", pd.routing_key)
        cfg = tmp_path / "gpuwarden.yaml"
        cfg.write_text(yaml.safe_dump({"spool": {"path": str(tmp_path / "spool.db")}, "notify": {"receivers": [
            {"name": "pager", "pagerduty": {"routing_key": {"env": "GW_PD_KEY"}, "url": pd.url}}]}}))
        assert await asyncio.to_thread(main, ["test-notify", "--config", str(cfg)]) == 0
    assert [(h.json["event_action"], h.json["dedup_key"]) for h in pd.accepted] == [
        ("trigger", "gpuwarden-test"), ("resolve", "gpuwarden-test")]
    assert pd.open == {}
    assert "then resolved" in capsys.readouterr().out


async def test_ack_of_an_unknown_or_resolved_fingerprint_is_an_error_naming_the_open_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = write_config(tmp_path)
    s = settings(tmp_path)
    spool = Spool(s.spool.path)
    n = Notifier(s, spool=spool, clock=EventClock(T0), delivery=Recorder())
    await n.handle(alert("fp-open-1", tier="critical"))
    await n.handle(alert("fp-done-2", tier="critical"))
    await n.handle(alert("fp-done-2", tier="critical", state="resolved", ts=T0 + 60))
    ack = ["ack", "--config", str(cfg), "--by", "ann"]
    assert await asyncio.to_thread(main, [*ack, "deadbeef"]) == 1
    err = capsys.readouterr().err
    assert "no open alert 'deadbeef'" in err and "fp-open-1" in err and "fp-done-2" not in err
    assert await asyncio.to_thread(main, [*ack, "fp-done-2"]) == 1  # already resolved
    capsys.readouterr()
    assert await asyncio.to_thread(main, [*ack, "fp-open"]) == 0  # a unique prefix, as messages show it
    assert capsys.readouterr().out == "acknowledged fp-open-1 by ann\n"
    await n.aclose()
    spool.close()


def test_ack_with_no_alert_known_exits_1_writing_nothing_and_creating_no_spool(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """#33: ``gpuwarden ack nonexistent`` in a directory with no spool exited 0, recorded the ack and
    created ./var/spool.db; a spool with no alert history or notifier state cannot know the alert either."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GPUWARDEN_CONFIG", raising=False)
    assert main(["ack", "nonexistent", "--by", "ann"]) == 1
    err = capsys.readouterr().err
    assert "no spool at var/spool.db" in err and "no open alert 'nonexistent'" in err and "nothing written" in err
    assert list(tmp_path.iterdir()) == []  # no ./var/spool.db
    cfg = write_config(tmp_path)
    Spool(tmp_path / "spool.db").close()  # a spool with neither alert history nor notifier state
    before = (tmp_path / "spool.db").read_bytes()
    assert main(["ack", "--config", str(cfg), "nonexistent", "--by", "ann"]) == 1
    assert "no alert history or notifier state in" in capsys.readouterr().err
    with Spool(tmp_path / "spool.db") as spool:
        assert load_spool(spool)[0].records == {}  # no ack recorded
    assert (tmp_path / "spool.db").read_bytes() == before
