"""Repeat offenders (notifiers/repeat.py): a GPU whose hardware alerts recur within the window gets
one "replace or inspect" attention naming its history, and its next hardware alerts are recorded,
not paged; alerts spread wider than the window never make one; the attention resolves once the
window has moved past; the window and count are the operator's; Chinese words; state kept."""

from __future__ import annotations

from pathlib import Path

from gpuwarden.contract import AlertTransition, Topics, decode
from gpuwarden.notifiers.config import RepeatOffenderConfig
from gpuwarden.notifiers.localise import localise_alert
from gpuwarden.notifiers.pipeline import Notifier
from gpuwarden.notifiers.repeat import RepeatOffenders
from gpuwarden.remediation.act import offer
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.spool import Spool
from tests.notifiers.test_pipeline import EventClock, Recorder, settings
from tests.notifiers.test_router import T0, alert

DAY = 86400.0


def _episode(fp: str, day: float, rule: str = "xid-hardware", gpu: str = "2") -> list[AlertTransition]:
    """One hardware alert of GPU ``gpu`` on node-01: firing, then resolved 10 minutes later."""
    start = T0 + day * DAY
    return [alert(fp, tier="critical", rule=rule, started=start, gpu=gpu),
            alert(fp, tier="critical", rule=rule, started=start, state="resolved", ts=start + 600, gpu=gpu)]


def _through(r: RepeatOffenders, *episodes: list[AlertTransition]) -> list[AlertTransition]:
    return [out for ep in episodes for t in ep for out in r.observe(t)]


def test_the_third_hardware_alert_in_two_weeks_makes_one_attention_and_pages_no_more() -> None:
    r = RepeatOffenders(RepeatOffenderConfig())
    out = _through(r, _episode("x1", 0), _episode("rr", 5, rule="row-remap"), _episode("x2", 9))
    offenders = [t for t in out if t.rule == "repeat-offender-gpu"]
    assert len(offenders) == 1 and offenders[0].tier.value == "attention"
    o = offenders[0]
    assert o.summary == ("node-01 GPU 2: 3 hardware alerts within 14 d (row-remap ×1, xid-hardware ×2); "
                         "replace or inspect it instead of a page per event.")
    assert o.labels == {"node": "node-01", "gpu": "2", "history": "row-remap ×1, xid-hardware ×2"}
    assert [(t.fingerprint, t.tier.value) for t in out if t.rule != "repeat-offender-gpu"] == [
        ("x1", "critical"), ("x1", "critical"), ("rr", "critical"), ("rr", "critical"),
        ("x2", "info"), ("x2", "info")]  # the third is recorded, not paged: the attention says it
    fourth = _through(r, _episode("x3", 10), _episode("x9", 10, gpu="5"))
    assert [(t.fingerprint, t.tier.value) for t in fourth] == [
        ("x3", "info"), ("x3", "info"), ("x9", "critical"), ("x9", "critical")]  # one attention; GPU 5 is its own
    assert r.tick(T0 + 18 * DAY) == []  # days 5, 9 and 10 still within the 14 days
    done = r.tick(T0 + 20 * DAY)  # day 5's has left them: two remain
    assert [(t.rule, t.state.value) for t in done] == [("repeat-offender-gpu", "resolved")]
    assert offer(RemediationConfig(backend="slurm"), o) is not None  # it offers a drain like the alerts it replaces


def test_alerts_further_apart_than_the_window_never_make_one_and_the_window_is_the_operators() -> None:
    sparse = _through(RepeatOffenders(RepeatOffenderConfig()), _episode("a", 0), _episode("b", 15), _episode("c", 30))
    assert all(t.rule == "xid-hardware" and t.tier.value == "critical" for t in sparse)
    wide = RepeatOffenders(RepeatOffenderConfig(window="35d", at_least=3))
    assert any(t.rule == "repeat-offender-gpu" for t in _through(wide, _episode("a", 0), _episode("b", 15),
                                                                  _episode("c", 30)))
    off = RepeatOffenders(RepeatOffenderConfig(enabled=False))
    assert all(t.tier.value == "critical" for t in _through(off, *(_episode(f"e{i}", i) for i in range(5))))


def test_the_attention_reads_in_chinese_and_its_state_survives_a_restart(tmp_path: Path) -> None:
    r = RepeatOffenders(RepeatOffenderConfig())
    o = next(t for t in _through(r, *(_episode(f"e{i}", i) for i in range(3))) if t.rule == "repeat-offender-gpu")
    zh = localise_alert(o, "zh-CN")
    assert zh.summary.startswith("node-01 GPU 2：14 天内出现 3 次硬件告警") and "更换或检修" in zh.summary
    again = RepeatOffenders(RepeatOffenderConfig())
    again.load(r.dump())
    assert [t.tier.value for t in _through(again, _episode("e9", 3))] == ["info", "info"]


async def test_the_notifier_records_the_attention_and_sends_no_fourth_page(tmp_path: Path) -> None:
    s = settings(tmp_path)
    with Spool(s.spool.path) as spool:
        clock, rec = EventClock(T0), Recorder()
        n = Notifier(s, spool=spool, clock=clock, delivery=rec)
        for i in range(4):
            for t in _episode(f"x{i}", i):
                clock.t = t.ts
                await n.handle(t)
                await n.tick()
        clock.t = T0 + 3 * DAY + 3600
        await n.tick()
        paged = [a.fingerprint for x in rec.got if x.receiver == "pager" for a in x.alerts if a.state.value == "firing"]
        assert paged == ["x0", "x1"]
        told = [a.rule for x in rec.got for a in x.alerts]
        assert "repeat-offender-gpu" in told
        history = [decode(r.value, AlertTransition) for r in spool.read(Topics().alerts)]
        assert [t.rule for t in history].count("repeat-offender-gpu") == 1
        await n.aclose()


def test_alerts_that_arrive_out_of_time_order_make_one_without_a_negative_hold() -> None:
    """The engine hands a batch's alerts over stage by stage, not in time order: the third to arrive
    may have started before the second (``gpuwarden demo`` died on a negative held_for_s, #33)."""
    r = RepeatOffenders(RepeatOffenderConfig())
    out = [o for t in (alert("b", tier="critical", rule="gpu-lost", started=T0 + 1.5, gpu="5"),
                       alert("a", tier="critical", rule="xid-hardware", started=T0, gpu="5"),
                       alert("c", tier="critical", rule="row-remap", started=T0 + 0.5, gpu="5"))
           for o in r.observe(t)]
    offender = next(t for t in out if t.rule == "repeat-offender-gpu")
    assert offender.evidence.held_for_s == 0.5 and offender.evidence.count == 3
