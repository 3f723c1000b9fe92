"""One node of a multi-node job holding the job back is named (job-straggler, streams/straggler.py);
healthy multi-node jobs, checkpoints, evaluations and pipeline stages that differ stay quiet.

The simulator's scenarios (``straggler``, ``multinode-checkpoints``, ``pipeline-parallel``) go
through the whole engine; the long quiet run loops stage 1's summaries of a simulated healthy
4-node job through stage 2 for 15 days of event time; hand-made summaries state one behaviour each.
"""

from __future__ import annotations

from functools import cache

import pytest

from gpuwarden.contract import AlertTransition, InferenceMetrics, TaskSummary
from gpuwarden.producers.simulator import STRAGGLER_SLOW, Simulator, sim_node
from gpuwarden.streams.classstage import ClassStage
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine, StageOutput
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.straggler import BUSY_GAP
from tests.streams.test_classstage_order import _delayed, _run

T0 = 1_700_000_000.0
ONSET_S = 3600.0
RULE = "job-straggler"
RULES = load_rules(None)


def _engine_run(scenario: str | list[str], span_s: float, *, nodes: int = 4, gpus: int = 4,
                onset_s: float = ONSET_S, seed: int = 1) -> list[AlertTransition]:
    sim = Simulator(scenario, nodes=nodes, gpus=gpus, seed=seed, start_ts=T0, tick_s=5.0, onset_s=onset_s)
    engine = Engine()
    return engine.process_many(sim.run(span_s)) + engine.flush()


def _firings(trs: list[AlertTransition], rule: str = RULE) -> list[AlertTransition]:
    return [t for t in trs if t.rule == rule and t.state.value == "firing"]


@cache
def _straggler_run() -> tuple[AlertTransition, ...]:
    return tuple(_engine_run("straggler", ONSET_S + 1800))


def test_the_slow_node_of_a_4_node_job_is_named_within_10_min_with_its_evidence() -> None:
    fired = _firings(list(_straggler_run()))
    assert [(t.labels["node"], t.labels["gpus"]) for t in fired] == [(sim_node(3), "0,1")]
    alert = fired[0]
    assert alert.ts - (T0 + ONSET_S) <= 600
    assert alert.tier.value == "attention" and alert.labels["task_class"] == "llama-pretrain"
    v = alert.evidence.values
    assert v["clock_vs_peers"] == pytest.approx(1 / STRAGGLER_SLOW, abs=0.03)
    assert v["tensor_vs_peers"] > 1.15 and v["nodes"] == 4
    assert v["step_time_rise"] == pytest.approx(STRAGGLER_SLOW - 1, abs=0.06)
    assert v["peers_comm_share"] > 0.25  # the others wait in collectives (the SDK's comm_s, rank 0)
    assert "sim-node-03 (GPUs 0,1) holds back llama-pretrain" in alert.summary
    assert alert.evidence.note is not None and "no slowdown reason reported" in alert.evidence.note


def test_nothing_before_the_onset_and_no_other_node_named() -> None:
    trs = list(_straggler_run())
    assert all(t.ts >= T0 + ONSET_S for t in _firings(trs))
    assert {t.labels["node"] for t in trs if t.rule == RULE} == {sim_node(3)}


def test_a_cap_nvml_reports_is_said_as_the_likely_cause() -> None:
    """A thermally throttled GPU of the multi-node job: the node is named, the cause is the cap."""
    fired = _firings(_engine_run("thermal-throttle", 2400, nodes=2, onset_s=180))
    assert [t.labels["node"] for t in fired] == [sim_node(0)]
    assert "thermal slowdown" in (fired[0].evidence.note or "")


def test_a_node_slow_from_the_start_is_named_against_its_peers() -> None:
    """No history of its own: the job's nodes run one clock, so its peers say it is slow."""
    fired = _firings(_engine_run("straggler", 1200, onset_s=0))
    assert [t.labels["node"] for t in fired] == [sim_node(3)] and fired[0].ts - T0 <= 600


@pytest.mark.parametrize("scenario", ["multinode-checkpoints", "pipeline-parallel"])
def test_checkpoints_evaluations_and_pipeline_stages_are_quiet(scenario: str) -> None:
    trs = _engine_run(scenario, ONSET_S + 3 * 3600)
    assert [t for t in trs if t.rule == RULE] == []


def test_pipeline_stages_differ_beyond_the_gap_so_the_quiet_is_the_own_ratio_s_doing() -> None:
    """A job-median comparison of tensor activity alone would flag a stage: they differ by more
    than BUSY_GAP; each stage keeps its own ratio, which is what it is judged against."""
    sums = [s for s in _summaries("pipeline-parallel", 3600) if s.task == "llama-pretrain" and s.ts > T0 + 600]
    by_node: dict[str, list[float]] = {}
    for s in sums:
        by_node.setdefault(s.node, []).append(s.stats["tensor_active"])
    means = sorted(sum(v) / len(v) for v in by_node.values())
    assert means[-1] / means[0] > 1 + BUSY_GAP


def test_a_pipeline_stage_that_slows_is_still_named() -> None:
    fired = _firings(_engine_run(["pipeline-parallel", "straggler"], ONSET_S + 1200))
    assert [t.labels["node"] for t in fired] == [sim_node(3)] and fired[0].ts - (T0 + ONSET_S) <= 600


@cache
def _summaries(scenario: str, span_s: float, seed: int = 1, tick_s: float = 5.0) -> tuple[TaskSummary, ...]:
    """Stage 1's summaries of a 4-node run (2 GPUs of each node in the multi-node job)."""
    sim = Simulator(scenario, nodes=4, gpus=4, seed=seed, start_ts=T0, tick_s=tick_s, onset_s=ONSET_S)
    stage, out = NodeStage(RULES, EngineConfig()), StageOutput([], [])
    for r in sim.run(span_s):
        if not isinstance(r, InferenceMetrics):
            stage.process(r, out=out)
    return (*out.summaries, *stage.flush().summaries)


def test_15_days_of_healthy_multi_node_training_are_quiet() -> None:
    """4 h of a healthy 4-node job (8 checkpoints) looped 90 times: 15 days of event time of its
    summaries through stage 2, minutes judged throughout."""
    day = [s for s in _summaries("healthy", 4 * 3600, seed=7, tick_s=10.0) if s.task == "llama-pretrain"]
    loop_s = 4 * 3600
    stage = ClassStage(RULES, EngineConfig())
    out: list[AlertTransition] = []
    for k in range(90):
        for s in day:
            out += stage.process(s.model_copy(update={"ts": s.ts + k * loop_s}))
    out += stage.flush()
    assert [t for t in out if t.rule == RULE] == []
    ranks = next(iter(stage._classes["llama-pretrain"].ranks.values())).ranks
    assert sorted(ranks) == [sim_node(n) for n in range(4)]
    assert all(len(r.clock) == r.clock.maxlen for r in ranks.values())  # judged, not skipped


def test_the_same_transitions_whatever_the_arrival_order_and_across_a_restore() -> None:
    """Stage 2 as the Kafka workers run it: one node's summaries an hour late (held by the
    lateness bound), and the state dumped and loaded halfway, give the same bytes."""
    sums = tuple(s for s in _summaries("straggler", ONSET_S + 1800) if s.task == "llama-pretrain")
    hold = 2 * 3600.0
    in_order, _ = _run(sums, hold)
    assert _firings(in_order)
    lagging, _ = _run(_delayed(sums, sim_node(3)), hold)
    restored, _ = _run(sums, hold, cut=len(sums) // 2)
    assert lagging == in_order == restored


def _summary(ts: float, node: str, **stats: float) -> TaskSummary:
    base = {"util_gpu": 95.0, "clock_frac": 0.97, "tensor_active": 60.0, "power_w": 600.0}
    return TaskSummary(ts=ts, task="train", task_id="job-9", node=node, window_s=60, samples=4, gpus=8,
                       stats={**base, **stats}, labels={"user": "ann", "gpus": "0,1,2,3,4,5,6,7"})


def _minutes(n: int, nodes: int = 4, **by_node: dict[str, float]) -> list[TaskSummary]:
    return [_summary(T0 + 60 * m, f"n{i}", **by_node.get(f"n{i}", {})) for m in range(n) for i in range(nodes)]


def test_all_ranks_dipping_together_judge_nothing_and_hold_a_firing_alert() -> None:
    stage = ClassStage(RULES, EngineConfig())
    out = []
    slow = {"n2": {"clock_frac": 0.75}}
    for s in _minutes(8, **slow):
        out += stage.process(s)
    assert [t.labels["node"] for t in _firings(out)] == ["n2"]
    for m in range(8, 18):  # ten minutes of a checkpoint: every node at 10 %
        for i in range(4):
            out += stage.process(_summary(T0 + 60 * m, f"n{i}", util_gpu=10.0))
    assert [t for t in out if t.state.value == "resolved"] == []


def test_two_nodes_are_enough_and_the_fast_one_is_not_named() -> None:
    stage = ClassStage(RULES, EngineConfig())
    out = []
    for s in _minutes(8, nodes=2, n1={"clock_frac": 0.8}):
        out += stage.process(s)
    assert [t.labels["node"] for t in _firings(out)] == ["n1"]


def test_a_rank_busier_than_usual_against_its_peers_is_named_once_its_usual_is_known() -> None:
    """Tensor activity: the stages' own ratios first (20 min), then one rank computes while the
    others wait; the clocks stay equal."""
    stage = ClassStage(RULES, EngineConfig())
    usual = {"n0": {"tensor_active": 40.0}, "n3": {"tensor_active": 75.0}}
    out = []
    for s in _minutes(20, **usual):
        out += stage.process(s)
    assert out == []
    waiting = {"n0": {"tensor_active": 32.0}, "n1": {"tensor_active": 48.0}, "n2": {"tensor_active": 48.0},
               "n3": {"tensor_active": 75.0}}
    for m in range(20, 30):
        for i in range(4):
            out += stage.process(_summary(T0 + 60 * m, f"n{i}", **waiting[f"n{i}"]))
    assert [t.labels["node"] for t in _firings(out)] == ["n3"]
    assert _firings(out)[0].evidence.values["tensor_vs_peers"] == pytest.approx(75 / 48, abs=1e-3)


def test_a_recorded_live_run_replays_to_the_same_straggler_alert(tmp_path, capsys) -> None:
    """`gpuwarden run --record` of the scenario, then `gpuwarden replay` of that recording."""
    from gpuwarden.app.cli import main

    cfg, rec = tmp_path / "gw.yaml", tmp_path / "straggler.jsonl"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\n")
    assert main(["run", "--config", str(cfg), "--simulate", "straggler", "--nodes", "4", "--duration", "15m",
                 "--start", str(int(T0)), "--json", "--record", str(rec)]) == 0
    live = capsys.readouterr().out
    assert main(["replay", "--config", str(cfg), "--from-file", str(rec), "--json"]) == 0
    replayed = capsys.readouterr().out
    assert f'"rule":"{RULE}"' in live and '"node":"sim-node-03"' in live
    assert replayed == live
