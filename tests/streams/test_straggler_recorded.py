"""job-straggler on a 4-node job built from the real H200 recording (tests/fixtures/h200, the
agent's 60 s of a bf16 matmul load under the task SDK), time-dilated ×20 as its other replays
(tests/streams/real_recordings.py: ``on_nodes``): the same recorded load on 4 nodes, each copy
0.4 s (8 s dilated) after the one before, one job (task id and class) that stage 2 compares node by
node. From an onset one node computes slower: its SM clock a share of the recorded, with no
clock-event reason (a cap NVML does not report) or with the HW power brake, every rank's step
longer and the others waiting in collectives. What each figure means: ``on_nodes``'s docstring.
"""

from __future__ import annotations

from functools import cache

import pytest

from gpuwarden.contract import AlertTransition
from gpuwarden.streams.straggler import BUSY_UTIL, MIN_HISTORY
from tests.streams.real_recordings import AGENT, BRAKE, JOB, SILENT, JobRun, SlowRank, job_node, job_run, records

RULE = "job-straggler"


@cache
def _run(slow: SlowRank | None, busy: bool = True) -> JobRun:
    return job_run(slow, busy=busy)


def _named(trs: list[AlertTransition]) -> list[AlertTransition]:
    return [t for t in trs if t.rule == RULE and t.state.value == "firing"]


def test_the_silently_slow_node_is_named_within_10_min_with_its_evidence() -> None:
    run = _run(SILENT)
    trs, named = run.transitions, _named(run.transitions)
    assert [t.labels["node"] for t in named] == [job_node(SILENT.node)]
    alert = named[0]
    assert 0 <= alert.ts - run.onset <= 600
    assert {t.labels["node"] for t in trs if t.rule == RULE} == {job_node(SILENT.node)}
    v = alert.evidence.values
    assert v["clock_vs_peers"] == pytest.approx(SILENT.share, abs=0.03) and v["nodes"] == 4
    assert v["power_vs_peers"] == pytest.approx(1.0, abs=0.05)  # the same work per step as theirs
    # Every step: data wait D + compute C/0.8 (the recording's D 20.1 ms, C 27.5 ms): +14 %, and the
    # peers wait the extra 6.9 ms of the 54.5 ms step in collectives.
    assert v["step_time_rise"] == pytest.approx(0.144, abs=0.02)
    assert v["peers_comm_share"] == pytest.approx(0.126, abs=0.02)
    assert "no slowdown reason reported" in (alert.evidence.note or "")
    assert f"{job_node(SILENT.node)} (GPUs 0) holds back {JOB['task']} ({JOB['task_id']}" in alert.summary


def test_a_power_brake_on_the_slow_node_is_named_as_its_cause() -> None:
    run = _run(BRAKE)
    named = _named(run.transitions)
    assert [t.labels["node"] for t in named] == [job_node(BRAKE.node)]
    assert 0 <= named[0].ts - run.onset <= 600
    v = named[0].evidence.values
    assert v["clock_vs_peers"] == pytest.approx(BRAKE.share, abs=0.03) and v["power_brake"] == 1.0
    assert "HW power brake or HW slowdown" in (named[0].evidence.note or "")


def test_the_unmodified_4_node_copy_is_judged_and_quiet() -> None:
    trs, judged, _ = _run(None)
    assert [t for t in trs if t.rule == RULE] == []
    # Not quiet for want of judging: every node's clock ratio learnt from its judged minutes.
    assert sorted(judged) == [job_node(i) for i in range(4)] and min(judged.values()) >= MIN_HISTORY


def test_as_recorded_its_utilization_is_too_low_for_any_minute_to_be_judged() -> None:
    """What the rule cannot see: the load's NVML utilization as the H200 reported it (0-7 %) is
    under BUSY_UTIL on every node, so no minute is judged and the slow node goes unnamed."""
    snaps = [r for r in records(AGENT) if hasattr(r, "gpus")]
    assert max(r.gpus.rows()[0].util_gpu or 0.0 for r in snaps) < BUSY_UTIL
    trs, judged, _ = _run(SILENT, busy=False)
    assert _named(trs) == [] and set(judged.values()) == {0}
