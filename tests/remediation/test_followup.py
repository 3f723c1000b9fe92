"""A drain is told in the alert's own conversation: ``gpuwarden act`` queues a note (reason
``update``, the alert with the note after its summary) in the outbox of every receiver the running
notifier routed the alert to (its saved router state), for that notifier to deliver; in Chinese
where the notifier speaks it; not for a refusal, nor to receivers that never had the alert."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuwarden.app.remediate import AutoPolicy, act_on
from gpuwarden.app.settings import validate_settings
from gpuwarden.contract import Topics
from gpuwarden.notifiers.outbox import decode_notification, outbox_topic
from gpuwarden.notifiers.pipeline import Notifier
from gpuwarden.remediation.act import audit_trail
from gpuwarden.spool import Spool
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


async def test_the_auto_policy_drains_as_the_notifier_routes_and_tells_it(tmp_path: Path) -> None:
    """As ``gpuwarden run`` and ``gpuwarden notify`` wire it: the notifier calls the policy with each
    transition it routed; a listed rule's firing alert is drained, recorded as auto:<rule> and told;
    an unlisted rule's waits for a person; a simulated one is never acted on."""
    base = _settings(tmp_path)
    s = base.model_copy(update={"remediation": base.remediation.model_copy(update={"auto": ["xid-node-repeated"]})})
    with Spool(s.spool.path) as spool:
        n = Notifier(s, spool=spool, clock=EventClock(T0), delivery=Recorder(), on_routed=AutoPolicy.of(s))
        repeated = alert("gn2", "xid-node-repeated")
        for t in (alert("gn1", "xid-hardware"), repeated, repeated.model_copy(update={"ts": T0 + 60}),  # an update
                  alert("gn3", "xid-node-repeated", simulated=True)):
            await n.handle(t)
        trail = list(audit_trail(spool, Topics()))
    assert [(r.node, r.outcome.value, r.by) for r in trail] == [("gn2", "done", "auto:xid-node-repeated")]
    assert sorted(p.name for p in tmp_path.glob("*.drained")) == ["gn2.drained"]
    (note,) = _outbox(s, "team-chat")
    assert note.alerts[0].summary.endswith("— drain gn2 through command: done, by auto:xid-node-repeated")
    assert AutoPolicy.of(base) is None  # auto is off unless the operator lists rules
