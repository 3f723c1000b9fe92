"""A drain is told in the alert's own conversation: ``gpuwarden act`` queues a note (reason
``update``, the alert with the note after its summary) in the outbox of every receiver the running
notifier routed the alert to (its saved router state), for that notifier to deliver; in Chinese
where the notifier speaks it; not for a refusal, nor to receivers that never had the alert."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuwarden.app.remediate import act_on
from gpuwarden.app.settings import validate_settings
from gpuwarden.app.standalone import Runner
from gpuwarden.contract import Topics
from gpuwarden.notifiers.outbox import decode_notification, outbox_topic
from gpuwarden.notifiers.pipeline import Notifier
from gpuwarden.remediation.act import Remediator, SpoolAudit, backend_for
from gpuwarden.spool import Spool
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from tests.notifiers.test_pipeline import EventClock, Recorder
from tests.notifiers.test_router import receivers
from tests.remediation.support import T0, alert, spool_alerts
from tests.remediation.test_command_auto import TOOL


def _settings(tmp: Path, language: str = "en"):
    tool = tmp / "tool.py"
    tool.write_text(TOOL)
    run = [sys.executable, str(tool)]
    return validate_settings({
        "spool": {"path": str(tmp / "spool.db")},
        "notify": {"receivers": receivers("team-chat", "pager", "other-chat"), "team": "team-chat",
                   "escalation": [{"receivers": ["pager"]}], "language": language},
        "remediation": {"backend": "command", "command": {
            "drain": [*run, "drain", "{node}", "{reason}"], "resume": [*run, "resume", "{node}"],
            "status": [*run, "status", "{node}"]}}})


async def _routed(tmp: Path, language: str = "en"):
    s = _settings(tmp, language)
    a = alert("gn1")
    spool_alerts(Path(s.spool.path), a)
    with Spool(s.spool.path) as spool:
        n = Notifier(s, spool=spool, clock=EventClock(T0), delivery=Recorder())
        await n.handle(a)
        n.save_state()
    return s, a


def _outbox(s, receiver: str) -> list:
    with Spool(s.spool.path) as spool:
        return [decode_notification(r.value) for r in spool.pending(outbox_topic(receiver))]


async def test_act_tells_the_receivers_that_had_the_alert(tmp_path: Path) -> None:
    s, a = await _routed(tmp_path)
    rec = act_on(s, a.fingerprint, "drain", "alice")
    assert rec.outcome.value == "done"
    for receiver in ("team-chat", "pager"):  # the team's chat and the page (critical, escalation on)
        (note,) = _outbox(s, receiver)
        assert note.reason == "update" and note.alerts[0].fingerprint == a.fingerprint
        assert note.alerts[0].summary == f"{a.summary} — drain gn1 through command: done, by alice"
    assert _outbox(s, "other-chat") == []
    assert act_on(s, a.fingerprint, "drain", "bob").outcome.value == "already"  # nothing new to tell
    assert len(_outbox(s, "team-chat")) == 1


async def test_the_note_speaks_the_notifiers_language(tmp_path: Path) -> None:
    s, a = await _routed(tmp_path, "zh-CN")
    act_on(s, a.fingerprint, "drain", "alice")
    (note,) = _outbox(s, "team-chat")
    assert note.alerts[0].summary.endswith("——下线（drain） gn1（command）：已完成，操作人 alice")


async def test_gpuwarden_runs_auto_policy_tells_it_too(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    cfg = s.remediation.model_copy(update={"auto": ["xid-hardware"]})
    with Spool(s.spool.path) as spool:
        runner = Runner(Engine(config=EngineConfig()), spool, Topics(), json_out=None, record=None,
                        notifier=Notifier(s, spool=spool, clock=EventClock(T0), delivery=Recorder()), state_key="t")
        runner.remediator = Remediator(backend_for(cfg), cfg, SpoolAudit(spool, Topics()))
        await runner.emit([alert("gn4")])
    (note,) = _outbox(s, "team-chat")
    assert note.alerts[0].summary.endswith("— drain gn4 through command: done, by auto:xid-hardware")
