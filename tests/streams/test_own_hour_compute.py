"""A job whose SM or tensor activity falls to a fraction of its own previous hour while its GPU
utilization and power stay up is attention without a class baseline (issue #30, point 2:
"utilization, SM/tensor activity or power").

NVML's utilization is the share of time a kernel runs, not the work it does: NCCL kernels spinning
in a collective, or math that fell off the tensor cores onto the CUDA cores, keep it at 95 %.
GPM's SM and tensor activity (``GpuSample.sm_active``/``tensor_active``, Hopper on) show the work.
``job-fell-below-own-hour`` judges them as it judges utilization and power (every minute of the
last 7 at most half the hour's median, any of the four): one alert for one fall, whichever metric
shows it first. Traces in ``tests/streams/traces.py``.
"""

from __future__ import annotations

import pytest

from gpuwarden.streams.engine import Engine

from tests.streams.traces import T0, trace

RULE = "job-fell-below-own-hour"
FALL = 4200.0  # 70 min into the job: after a full hour of its own history
WITHIN_S = 600.0
SPAN = int(FALL + WITHIN_S + 300)
BUSY = 95.0


def _fired(records) -> list:
    engine = Engine()  # default config: classes learn for 14 days, no class baseline here
    return [t for t in engine.process_many(records) + engine.flush() if t.state.value == "firing"]


def _at(fell: tuple[float, float], before: tuple[float, float] = (80.0, 60.0)):
    return lambda t: before if t < FALL else fell


@pytest.mark.parametrize("sdk", [True, False], ids=["sdk", "no-sdk"])
def test_tensor_activity_falling_at_full_utilization_is_attention_naming_the_tensor_cores(sdk: bool) -> None:
    """Math off the tensor cores (AMP or TF32 turned off): utilization 95 %, SM activity 80 %,
    power 650 -> 560 W, tensor activity 60 -> 4 %. The cause is GPM's, with or without the SDK."""
    fired = _fired(trace(SPAN, lambda t: BUSY, lambda t: 40.0, sdk=sdk, gpm=_at((78.0, 4.0)),
                         power_w=lambda t: 650.0 if t < FALL else 560.0))
    assert [(t.rule, t.tier.value) for t in fired] == [(RULE, "attention")]
    t = fired[0]
    assert 0 < t.ts - (T0 + FALL) <= WITHIN_S
    # The window's first minute holds the fall's first seconds: its highest is that minute's mean.
    v = t.evidence.values
    assert (v["tensor_active_before"], v["sm_active_before"], v["power_w_before"]) == (60.0, 80.0, 650.0)
    assert v["tensor_active_now"] <= 30.0 and v["util_gpu_now"] == BUSY and v["power_w_now"] > 325.0
    assert t.summary.startswith("llm-pretrain (job-1, alice) on n1 fell to a fraction of its own previous hour: "
                                "at most 95% GPU utilization, 590 W, 79% SM and 23% tensor activity in each minute "
                                "of the last 7 min, against 95%, 650 W, 80% and 60% (medians of the hour before).")
    assert t.summary.endswith(" Likely cause: its math left the tensor cores (SM activity held while tensor "
                              "activity fell, same 7 min).")


@pytest.mark.parametrize("sdk,cause", [
    # the 7 min's first minute holds steps from before the fall: 77 %, not 80
    (True, "communication (collectives take 77% of each step, same 7 min)."),
    (False, "cause unknown: no task metrics (the task reports no steps through the SDK)."),
])
def test_sm_and_tensor_activity_falling_while_nccl_keeps_utilization_up(sdk: bool, cause: str) -> None:
    """Ranks waiting in collectives: NCCL kernels keep utilization at 95 % and moving data keeps
    power at 400 of 650 W, SM activity 80 -> 12 %, tensor 60 -> 1 %; the SDK's steps say 80 % in
    communication (from the fall on)."""
    fired = _fired(trace(SPAN, lambda t: BUSY, lambda t: 40.0, sdk=sdk, gpm=_at((12.0, 1.0)),
                         power_w=lambda t: 650.0 if t < FALL else 400.0,
                         comm=lambda t: 0.1 if t < FALL else 0.8))
    mine = [t for t in fired if t.rule == RULE]
    assert len(mine) == 1 and 0 < mine[0].ts - (T0 + FALL) <= WITHIN_S
    assert mine[0].evidence.values["util_gpu_now"] == BUSY and mine[0].evidence.values["power_w_now"] > 325.0
    assert mine[0].summary.endswith(" Likely cause: " + cause)


def test_everything_falling_together_is_one_alert_with_every_figure() -> None:
    """95 -> 3 %, 650 -> 140 W and GPM with them: one firing, the four figures stated."""
    fired = _fired(trace(SPAN, lambda t: BUSY if t < FALL else 3.0, lambda t: 40.0, gpm=_at((2.0, 0.0)),
                         power_w=lambda t: 650.0 if t < FALL else 140.0))
    mine = [t for t in fired if t.rule == RULE]
    assert len(mine) == 1 and {t.rule for t in fired} - {"idle-allocated-gpu", "idle-allocated-job"} == {RULE}
    assert "against 95%, 650 W, 80% and 60% (medians of the hour before)." in mine[0].summary


def test_a_gpu_without_gpm_is_not_judged_on_it() -> None:
    """No SM or tensor activity reported (before Hopper, MIG, GPM unavailable): a job whose
    utilization and power held has not fallen by what the GPU says."""
    assert _fired(trace(SPAN, lambda t: BUSY, lambda t: 40.0, power_w=lambda t: 650.0 if t < FALL else 560.0)) == []


def test_a_job_with_little_tensor_work_has_none_to_lose() -> None:
    """Tensor activity 6 -> 1 % (a job that mostly runs on the CUDA cores): below the 10 % its hour
    must reach to be judged; its SM activity held."""
    assert _fired(trace(SPAN, lambda t: BUSY, lambda t: 40.0, gpm=_at((80.0, 1.0), (80.0, 6.0)))) == []


def test_the_resolve_says_the_job_is_back() -> None:
    back = FALL + 1500
    recs = trace(int(back + 1800), lambda t: BUSY, lambda t: 40.0,
                 gpm=lambda t: (78.0, 4.0) if FALL <= t < back else (80.0, 60.0))
    engine = Engine()
    out = [t for t in engine.process_many(recs) + engine.flush() if t.rule == RULE]
    assert [t.state.value for t in out] == ["firing", "resolved"]
    assert out[1].summary.startswith("llm-pretrain (job-1, alice) on n1 is back: up to 95% GPU utilization, 500 W, "
                                     "80% SM and 60% tensor activity in the last 7 min, against ")
    assert "Likely cause" not in out[1].summary and out[1].ts > T0 + back


@pytest.mark.parametrize("gpu_model,fires", [("H200", True), ("A100", False)])
def test_the_simulators_tensor_fallback_with_and_without_gpm(gpu_model: str, fires: bool) -> None:
    """The simulator's ``tensor-fallback`` an hour into the job (``producers/simulator.py``): on
    H200s (GPM) the rule fires within 10 min naming the tensor cores; on A100s (no GPM: no SM or
    tensor activity reported) utilization and power held, so nothing is said."""
    from gpuwarden.producers.simulator import Simulator

    start, onset = 1_700_000_000.0, 3600.0
    sim = Simulator("tensor-fallback", nodes=1, gpus=2, seed=0, start_ts=start, tick_s=5.0,
                    gpu_model=gpu_model, onset_s=onset)
    fired = _fired(list(sim.run(onset + 1200)))
    assert [t.rule for t in fired if t.tier.value != "info"] == ([RULE] if fires else [])
    if fires:
        assert 0 < fired[0].ts - (start + onset) <= WITHIN_S
        assert "Likely cause: its math left the tensor cores" in fired[0].summary


def test_the_simulators_multinode_checkpoints_and_evaluations_are_quiet() -> None:
    """The simulator's 4-node job checkpointing every 10 min (60 s, nodes staggered) with a 4-min
    evaluation at the end of every 30 min, run straight into a checkpoint: utilization 38 % of
    ~97 % and tensor activity a quarter of training's while it evaluates, 10 % in a checkpoint.
    Three hours after the first of the job's own: the own-hour rule says nothing."""
    from gpuwarden.producers.simulator import Simulator

    sim = Simulator("multinode-checkpoints", nodes=4, gpus=4, seed=1, start_ts=1_700_000_000.0, tick_s=5.0,
                    onset_s=3600.0)
    fired = _fired(list(sim.run(4 * 3600)))
    assert [t.rule for t in fired if t.rule == RULE] == []


@pytest.mark.parametrize("name", ["h200-agent", "h200-leak-probe"])
def test_the_real_recordings_gpm_readings_reach_the_jobs_window(name: str) -> None:
    """The agent's real H200 recording carries GPM: read on the slow cadence (every 15 s, at 2, 17,
    32 and 47 s) and held between reads, SM activity 0.0, 0.0, 0.0, 12.13 % and tensor activity
    0.0, 0.0, 0.0, 11.75 % (the load draws 228-259 W at 0-7 % utilization: light work); the leak
    probe's 10 Hz trace has none. Dilated as the real-recordings tests replay them, each task
    summary stage 2 judges carries the minute's mean of the readings, or no such stat at all."""
    from gpuwarden.contract import NodeSnapshot, TaskSummary
    from gpuwarden.streams.config import EngineConfig
    from gpuwarden.streams.nodestage import NodeStage
    from gpuwarden.streams.output import StageOutput
    from gpuwarden.streams.rules import load_rules

    from tests.streams.real_recordings import AGENT, PROBE, as_task, dilate, records

    recs = records(AGENT) if name == "h200-agent" else as_task(records(PROBE))
    k = 20 if name == "h200-agent" else 60
    snaps = dilate(recs, k)
    stage, out = NodeStage(load_rules(None), EngineConfig(allowed_lateness=0)), StageOutput([], [])
    for r in snaps:
        stage.process(r, out=out)
    # The GPU's (its process's) summaries; the agent recording's SDK steps make a task of their own.
    summaries: list[TaskSummary] = [s for s in out.summaries if "power_w" in s.stats]
    assert len(summaries) >= 10
    if name == "h200-leak-probe":
        assert all("sm_active" not in s.stats and "tensor_active" not in s.stats for s in summaries)
        return
    t0 = snaps[0].ts
    held: list[tuple[float, float, float]] = []  # (dilated ts, sm, tensor) of each snapshot
    for r in snaps:
        if isinstance(r, NodeSnapshot):
            g = r.gpus.rows()[0]
            held.append((r.ts, g.sm_active, g.tensor_active))
    assert {(sm, ten) for _, sm, ten in held if sm is not None} == {(0.0, 0.0), (12.13, 11.75)}
    for s in summaries:
        assert 0.0 <= s.stats["sm_active"] <= 12.13 and 0.0 <= s.stats["tensor_active"] <= 11.75
    before = [s for s in summaries if s.ts <= t0 + 46 * k]
    after = [s for s in summaries if s.ts - s.window_s >= t0 + 47 * k]
    assert before and after
    assert {(s.stats["sm_active"], s.stats["tensor_active"]) for s in before} == {(0.0, 0.0)}
    assert {(s.stats["sm_active"], s.stats["tensor_active"]) for s in after} == {(12.13, 11.75)}
