"""Control state semantics, the on-call rotation, and the silence CLI against the real control topic."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import yaml

from gpuwarden.app.cli import main
from gpuwarden.app.settings import load_settings
from gpuwarden.contract import Ack, Silence, Topics, encode, record_key
from gpuwarden.notifiers.config import ScheduleConfig, parse_matcher
from gpuwarden.notifiers.control import ControlState
from gpuwarden.notifiers.kafka import read_control
from gpuwarden.notifiers.oncall import Cover, on_call
from tests.kafka_support import produce, unique_topic
from tests.notifiers.test_router import DAY, T0, alert


def silence(sid: str, start: float, end: float, *matchers: str) -> Silence:
    return Silence(id=sid, matchers=[parse_matcher(m) for m in matchers], starts_at=start, ends_at=end,
                   created_by="ops")


def test_silence_window_tombstone_and_last_write_wins() -> None:
    st = ControlState()
    s = silence("s1", T0, T0 + 60, "node=node-01", "tier!=critical")
    st.apply_raw(record_key(s), encode(s))
    assert st.silenced_by(alert("a"), T0) == "s1"
    assert st.silenced_by(alert("a"), T0 - 1) is None            # not started yet
    assert st.silenced_by(alert("a"), T0 + 60) is None           # ends_at is exclusive
    assert st.silenced_by(alert("c", tier="critical"), T0) is None
    assert st.silenced_by(alert("b", node="node-02"), T0) is None
    expired = s.model_copy(update={"ends_at": T0 + 10})
    st.apply(expired)                                            # `silence expire` = a newer ends_at
    assert st.silenced_by(alert("a"), T0 + 10) is None and len(st.silences()) == 1
    st.apply_raw("silence:s1", None)                             # a tombstone forgets it
    assert st.silences() == []
    st.apply(silence("r1", T0, T0 + 60, "node=~node-0[12]", "rule!~thermal.*"))  # no '=' matcher
    st.apply(silence("r0", T0 - 5, T0 + 60, "gpu=3", "node=~node-0[12]"))
    assert st.silenced_by(alert("a", node="node-02"), T0) == "r1"
    assert st.silenced_by(alert("a", node="node-02", gpu="3"), T0) == "r0"  # the oldest active one
    assert st.silenced_by(alert("a", node="node-03"), T0) is None
    assert st.silenced_by(alert("t", node="node-01", rule="thermal_x"), T0) is None


def test_ack_covers_only_the_episode_it_was_given_for() -> None:
    st = ControlState()
    st.apply(Ack(fingerprint="x", by="ann", at=T0 + 5))
    assert st.ack(alert("x", started=T0)) is not None
    assert st.ack(alert("x", started=T0 + 6)) is None
    assert st.ack(alert("y", started=T0)) is None


def test_weekly_and_daily_rotation_with_overrides() -> None:
    weekly = ScheduleConfig(rotation="weekly", start=T0, users=["ann", "ben", "cat"])
    assert [on_call(weekly, T0 + d * DAY) for d in (0, 6.99, 7, 14, 21, -0.01)] == [
        "ann", "ann", "ben", "cat", "ann", "cat"]
    daily = ScheduleConfig.model_validate({"rotation": "daily", "start": "2023-11-14T22:13:20+00:00",
                                           "users": ["dan", "eve"],
                                           "overrides": [{"user": "fay", "starts_at": T0 + DAY,
                                                          "ends_at": T0 + 2 * DAY}]})
    assert daily.start == T0
    assert [on_call(daily, T0 + h * 3600) for h in (1, 25, 49)] == ["dan", "fay", "dan"]
    # A later swap (control topic) supersedes the configured one where they overlap.
    swap = [Cover("gus", T0 + DAY + 3600, T0 + DAY + 7200)]
    assert [on_call(daily, T0 + DAY + h * 3600, swap) for h in (0.5, 1.5, 2.5)] == ["fay", "gus", "fay"]


@pytest.mark.kafka
async def test_silence_cli_on_the_control_topic(kafka_bootstrap: str, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    prefix = unique_topic("ctl") + "."
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(yaml.safe_dump({"kafka": {"bootstrap": kafka_bootstrap, "topic_prefix": prefix},
                                   "spool": {"path": str(tmp_path / "spool.db")},
                                   "notify": {"control": "kafka"}}))
    settings = load_settings(cfg)

    def cli(*argv: str) -> int:
        return main([argv[0], "--config", str(cfg), *argv[1:]])

    assert await asyncio.to_thread(cli, "silence", "add", "node=node-07", "rule=~thermal.*",
                                   "--for", "2h", "--comment", "maintenance") == 0
    sid = capsys.readouterr().out.split()[0]
    assert await asyncio.to_thread(cli, "silence", "add", "user=bob", "--for", "1h") == 0
    other = capsys.readouterr().out.split()[0]
    assert await asyncio.to_thread(cli, "ack", "fp-1", "--by", "ann") == 0
    assert capsys.readouterr().out == "acknowledged fp-1 by ann\n"
    # A record that breaks the contract on the topic is reported and skipped, not fatal.
    await produce(kafka_bootstrap, Topics(prefix).control, [(b"silence:junk", b"{not json")])

    state = await read_control(settings.kafka)
    assert "control record silence:junk" in caplog.text
    now = time.time()
    assert {s.id for s in state.silences(now)} == {sid, other}
    assert state.records["ack:fp-1"].by == "ann"

    assert await asyncio.to_thread(cli, "silence", "expire", sid) == 0
    assert await asyncio.to_thread(cli, "silence", "list") == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed if not line.endswith("expired")] == [other]
    state = await read_control(settings.kafka)
    assert {s.id for s in state.silences(time.time())} == {other}
    assert state.records[f"silence:{sid}"].comment == "maintenance"  # history kept, ends_at moved
