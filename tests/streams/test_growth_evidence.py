"""Issue #30, point 5: a memory-leak's evidence is the growth's own window. Its "from" is where the
sustained growth began, not a start-up ramp before it, and it counts every checkpoint the task's
SDK reported finished since the growth began (the leak probe's three, beyond the 30 min that
``ckpt_released`` looks back). A resolve says what happened: the memory given back, the task ended."""

from __future__ import annotations

import pytest

from gpuwarden.contract import TaskMetric, TaskMetricKind
from gpuwarden.notifiers.localise import localise_alert
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import load_rules
from tests.streams.real_recordings import (
    PROBE, PROBE_CHECKPOINTS, PROBE_ONSET_S, as_task, dilate, records, run,
)
from tests.streams.traces import trace


def _leak(transitions: list) -> list:
    return [t for t in transitions if t.rule == "memory-leak" and t.state == "firing"]


def test_growth_after_a_start_up_ramp_is_reported_from_where_it_began() -> None:
    """The simulator's shape (its memory-leak scenario): 0.6 -> 63.8 GiB in the first minute, then
    9.4 GiB/h. The alert said "went from 3.2 to 65.1 GiB over 9 min": a reader concluded 62 GiB leaked."""
    def mem(t: float) -> float:
        return 0.6 + 63.2 * t / 60 if t < 60 else 63.8 + 9.4 * (t - 60) / 3600

    engine = Engine(load_rules(None), EngineConfig(allowed_lateness=0))
    out = engine.process_many(list(trace(40 * 60, lambda t: 95.0, mem))) + engine.flush()
    t = _leak(out)[0]
    v = t.evidence.values
    assert v["mem_used_gib_start"] >= 63.8 and v["mem_used_gib"] - v["mem_used_gib_start"] < 5
    assert t.evidence.slope == pytest.approx(9.4, rel=0.25)
    rise = t.evidence.slope * t.evidence.window_s / 3600  # one window: the slope over it gives the rise
    assert rise == pytest.approx(v["mem_used_gib"] - v["mem_used_gib_start"], rel=0.35)
    assert "went from 63." in t.summary


def test_every_checkpoint_finished_since_the_growth_began_is_counted() -> None:
    """The leak probe as a job at low utilization with its three SDK checkpoints during the leak,
    ×20 (it fires after the second ended): the count is the checkpoints finished inside the growth's
    window; without the SDK nothing is counted."""
    recs = records(PROBE)
    t0 = min(r.ts for r in recs)
    k = 20
    with_sdk = _leak(run(dilate(as_task(recs, checkpoints=PROBE_CHECKPOINTS), k)))[0]
    ended = [t0 + k * e for _, e in PROBE_CHECKPOINTS]
    since = with_sdk.ts - with_sdk.evidence.window_s
    assert with_sdk.evidence.values["checkpoints"] == sum(since < e <= with_sdk.ts for e in ended) == 2
    assert with_sdk.summary.endswith("(198.0 GiB/h; checkpoints finished since it began: 2, not released "
                                     "after the last).")
    without = _leak(run(dilate(as_task(recs), k)))[0]
    assert without.evidence.values["checkpoints"] == 0
    assert without.summary.endswith("; no checkpoint finished since it began).")
    assert without.ts - (t0 + k * PROBE_ONSET_S) <= 300


def _run(records: list) -> list:
    engine = Engine(load_rules(None), EngineConfig(allowed_lateness=0))
    return engine.process_many(records) + engine.flush()


def test_a_leak_whose_memory_is_freed_resolves_saying_how_much() -> None:
    """The issue's leak: 5.0 -> ~45 GiB in 20 min (118 GiB/h), then the memory freed back to 5.0 GiB;
    the resolve said "went from 5.0 to 5.0 GiB … no finished checkpoint seen"."""
    def mem(t: float) -> float:
        return 5.0 + 118.0 * min(t, 1200.0) / 3600 if t < 1500 else 5.0

    out = [t for t in _run(list(trace(3600, lambda t: 5.0, mem))) if t.rule == "memory-leak"]
    assert [t.state for t in out] == ["firing", "resolved"]
    v = out[1].evidence.values
    assert v["mem_used_gib_peak"] == pytest.approx(44.3, abs=0.7) and v["mem_used_gib"] == pytest.approx(5.0, abs=0.1)
    assert out[1].summary == (
        "GPU memory of llm-pretrain (job-1, alice) on n1 GPU 0 no longer grows: "
        f"{v['mem_used_gib_peak']:.1f} GiB at its highest while the alert was open, 5.0 GiB now "
        f"({v['mem_used_gib_released']:.1f} GiB released).")
    zh = localise_alert(out[1], "zh-CN").summary
    assert zh.startswith("n1 GPU 0 上 llm-pretrain（job-1，alice）的显存不再增长：告警期间最高 ") and "现在 5.0 GiB" in zh


def test_a_task_alert_resolved_by_the_task_ending_says_so() -> None:
    """data-loader-starvation (a task's alert) open when the task's exit record comes."""
    recs = list(trace(20 * 60, lambda t: 60.0, lambda t: 40.0, sdk=True, data_wait=lambda t: 0.5))
    last = recs[-1]
    recs.append(TaskMetric(ts=last.ts + 1, node="n1", task="llm-pretrain", task_id="job-1",
                           kind=TaskMetricKind.EXIT, pid=100))
    recs += list(trace(22 * 60, lambda t: 0.0, lambda t: 0.0, task_id="job-2"))[20 * 60 + 5:]
    out = [t for t in _run(recs) if t.rule == "data-loader-starvation"]
    assert [t.state for t in out] == ["firing", "resolved"]
    assert out[1].evidence.note.startswith("resolved: the task ended")
