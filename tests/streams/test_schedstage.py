"""The scheduler stage (key cluster) and the allocated-versus-used join in stage 1, on hand-built
polls: every figure and threshold here is on paper."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpuwarden.config import ConfigError, validate
from gpuwarden.contract import DeadLetter, JobState as S, Topics, decode, encode
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.dlq import Inbound, Limits
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.clustertask import ClusterTask
from gpuwarden.streams.task import Batch, TaskId
from gpuwarden.streams.schedstage import SchedulerStage
from tests.streams.sched_records import CLUSTER, job, node, poll, samples

T = 1_700_000_000.0


def fired(trs: list) -> list[tuple[str, str, float]]:
    return [(t.rule, t.state.value, t.ts - T) for t in trs]


def run(engine: Engine, records: list[Any]) -> list:
    return engine.process_many(records)


def fragmented_polls(start: float, end: float, big_starts: float | None = None) -> list[Any]:
    out = []
    t = start
    while t < end:
        big = job("3", S.PENDING, T + t, gpus=4, submit=T - 50, reason="Resources") if big_starts is None or \
            t < big_starts else job("3", S.RUNNING, T + t, gpus=4, submit=T - 50, start=T + big_starts,
                                    alloc={"gn1": [0, 1, 2, 3]})
        jobs = [job("1", S.RUNNING, T + t, gpus=2, start=T - 100, alloc={"gn1": [0, 1]}),
                job("2", S.RUNNING, T + t, gpus=2, start=T - 100, alloc={"gn2": [0, 1]}), big]
        out += poll(T + t, jobs, [node("gn1", T + t, 4, 2 + 2 * (big.state == S.RUNNING)), node("gn2", T + t, 4, 2)])
        t += 30
    return out


def test_fragmentation_fires_after_its_threshold_with_the_nodes_and_resolves_when_the_job_starts() -> None:
    eng = Engine()
    trs = run(eng, fragmented_polls(0, 1200, big_starts=900))
    assert fired(trs) == [("scheduler-fragmentation", "firing", 600.0), ("scheduler-fragmentation", "resolved", 900.0)]
    f = trs[0]
    assert f.tier.value == "attention" and f.labels["job"] == "3" and f.labels["user"] == "alice"
    assert f.evidence.note == "gn1: 2 free, gn2: 2 free" and f.evidence.values == {"gpus": 4.0, "free": 4.0}
    assert "4 GPUs on one node: 4 are free in total but no node has 4" in f.summary


def test_figures_per_partition_and_gpu_count() -> None:
    eng = Engine()
    run(eng, fragmented_polls(0, 90))
    f = eng.scheduler.figures(CLUSTER)
    assert (f.pending, f.running, f.gpus_total, f.gpus_allocated, f.allocation_rate) == (1, 2, 8, 4, 0.5)
    assert f.reasons == {"Resources": 1} and list(f.fragmented) == ["3"]
    q = f.queues["gpu"]
    assert (q.pending, q.running, q.wait_p50_s, q.wait_max_s) == (1, 2, 110.0, 110.0)  # poll at T+60, submit T-50
    assert (f.by_gpus["4"].pending, f.by_gpus["2"].running) == (1, 2)
    # Queue versus compute: job 1 ran from T-100 (first seen at T), job 3 has waited since T-50.
    assert f.jobs["1"] == [0.0, 160.0] and f.jobs["3"] == [110.0, 0.0]
    assert f.users["alice"] == [110.0, 320.0]


def test_no_fragmentation_when_one_node_has_room_or_too_few_are_free() -> None:
    eng = Engine()
    recs = poll(T, [job("9", S.PENDING, T, gpus=4, submit=T, reason="Resources")],
                [node("gn1", T, 4, 0), node("gn2", T, 4, 2)])
    recs += poll(T + 30, [job("9", S.PENDING, T + 30, gpus=4, submit=T, reason="Resources")],
                 [node("gn1", T + 30, 4, 3), node("gn2", T + 30, 4, 2)])
    run(eng, recs[: len(recs) // 2])
    assert eng.scheduler.figures(CLUSTER).fragmented == {}  # gn1 has 4 free
    run(eng, recs[len(recs) // 2:])
    assert eng.scheduler.figures(CLUSTER).fragmented == {}  # 3 free in total


def _waits(n_started: int, stuck_from: float, until: float) -> list[Any]:
    """Jobs of class gpu/1 that waited 60 s each (one a minute), then from ``stuck_from`` one that waits."""
    out, t = [], 0.0
    while t < until:
        jobs = [job(f"s{k}", S.RUNNING, T + t, submit=T + 60 * k, start=T + 60 * k + 60, alloc={"gn1": [0]})
                for k in range(n_started) if 60 * k + 60 <= t < 60 * k + 120]
        if t >= stuck_from:
            jobs.append(job("late", S.PENDING, T + t, submit=T + stuck_from, reason="Priority"))
        out += poll(T + t, jobs, [node("gn1", T + t, 4, len(jobs) - (t >= stuck_from))])
        t += 30
    return out


def test_wait_above_baseline_for_consecutive_periods_goes_to_attention() -> None:
    cfg = EngineConfig.model_validate({"scheduler": {"period": "60s", "wait_periods": 3, "wait_min": "5m",
                                                     "wait_baseline_min": 10}})
    eng = Engine(config=cfg)
    trs = run(eng, _waits(12, 900, 2400))
    # The stuck job's wait passes 300 s (limit: max(60 + 3 x 0, 300)) at t=1230; 3 periods later: 1410.
    assert fired(trs) == [("scheduler-wait-above-baseline", "firing", 1410.0)]
    t = trs[0]
    assert t.labels == {"cluster": CLUSTER, "queue": "gpu", "gpus": "1"}
    assert t.evidence.values["baseline_s"] == 60.0 and t.evidence.values["limit_s"] == 300.0
    assert eng.scheduler.figures(CLUSTER).baselines == {"gpu/1": 60.0}


def test_no_wait_alert_before_the_class_has_a_baseline() -> None:
    cfg = EngineConfig.model_validate({"scheduler": {"period": "60s", "wait_min": "5m"}})
    assert fired(run(Engine(config=cfg), _waits(5, 400, 2400))) == []  # 5 started jobs: under the 10 needed


def test_requeues_count_from_state_changes_and_the_restart_field_info_then_attention() -> None:
    eng = Engine()
    recs, t = [], 0.0
    # Running; then preempted (back to pending) every 120 s; Slurm's restart count lags one behind.
    for k in range(6):
        recs += poll(T + t, [job("r", S.RUNNING, T + t, gpus=2, start=T + t, restarts=max(0, k - 1),
                                 alloc={"gn1": [0, 1]})], [node("gn1", T + t, 4, 2)])
        recs += poll(T + t + 60, [job("r", S.PENDING, T + t + 60, gpus=2, reason="BeginTime",
                                      restarts=max(0, k - 1))], [node("gn1", T + t + 60, 4, 0)])
        t += 120
    trs = run(eng, recs)
    assert fired(trs) == [("scheduler-requeued", "firing", 180.0), ("scheduler-requeued", "resolved", 420.0),
                          ("scheduler-requeued-repeatedly", "firing", 420.0)]
    assert trs[0].tier.value == "info" and trs[2].tier.value == "attention" and trs[2].evidence.count == 4


def test_success_rate_drop_against_the_class_baseline() -> None:
    cfg = EngineConfig.model_validate({"scheduler": {"success_window": 5, "success_min_jobs": 10,
                                                     "success_drop": 0.3}})
    eng = Engine(config=cfg)
    recs = []
    # 12 jobs complete, then failures: at the 15th job the last 5 hold 3 (60 % against 100 %).
    outcomes = [S.COMPLETED] * 12 + [S.FAILED, S.COMPLETED, S.FAILED, S.FAILED, S.FAILED]
    for k, end in enumerate(outcomes):
        ts = T + 30 * k
        # Slurm lists an ended job for a while (MinJobAge): the previous one is in this poll again.
        again = [job(f"j{k - 1}", outcomes[k - 1], ts, submit=ts - 130, start=ts - 90)] if k else []
        recs += poll(ts, [*again, job(f"j{k}", end, ts, submit=ts - 100, start=ts - 60)], [node("gn1", ts, 4, 0)])
    trs = run(eng, recs)
    assert fired(trs) == [("scheduler-success-rate-drop", "firing", 30.0 * 14)]
    assert trs[0].evidence.values == {"rate": 0.6, "baseline_rate": 1.0, "jobs": 5.0}


def _held(busy: dict[int, float], until: float, procs_on: list[int] | None = None,
          until_busy: float | None = None) -> list[Any]:
    """Job 77 holds node-00's 8 GPUs; the samples show ``busy`` (from ``until_busy`` on: all 8);
    Slurm lets it go at ``until``."""
    out = []
    for k in range(0, int(until) + 60, 5):
        now = busy if until_busy is None or k < until_busy else {i: 90.0 for i in range(8)}
        out.append(samples("node-00", T + k, k, now if k < until else {}, "77", procs_on=procs_on))
        if k % 30 == 0:
            running = k < until
            out += poll(T + k, [job("77", S.RUNNING, T + k, gpus=8, start=T - 5, alloc={"node-00": list(range(8))})]
                        if running else [], [node("node-00", T + k, 8, 8 if running else 0)])
    return out


def test_a_job_holding_8_gpus_and_using_2_is_told_to_its_owner() -> None:
    eng = Engine()
    trs = [t for t in run(eng, _held({0: 90.0, 1: 85.0}, 2400)) + eng.flush() if t.rule == "job-gpus-unused"]
    # unused_for 7.5 min (30 before issue #30, point 3): at 460 s, not 1810
    assert fired(trs) == [("job-gpus-unused", "firing", 460.0), ("job-gpus-unused", "resolved", 2400.0)]
    t = trs[0]
    assert t.tier.value == "attention"
    assert t.labels == {"cluster": CLUSTER, "job": "77", "node": "node-00", "user": "alice", "queue": "gpu",
                        "project": "vision"}
    assert t.evidence.values == {"allocated": 8.0, "busy": 2.0, "idle": 6.0}
    assert t.summary == "job 77 (alice) holds 8 GPUs on node-00 but uses 2"
    assert t.evidence.note == "busy GPUs: 0,1; idle GPUs (util < 5 %): 2,3,4,5,6,7; the job's processes on GPUs: 0,1"
    ended = trs[1]  # Slurm let the job go at 2400: resolved with the job, having fired 2400 - 460 s
    assert ended.evidence.held_for_s == 1940.0  # the firing's own (how long it was pending) before


def test_a_job_using_all_its_gpus_raises_nothing() -> None:
    eng = Engine()
    trs = run(eng, _held({i: 80.0 for i in range(8)}, 2400)) + eng.flush()
    assert [t for t in trs if t.rule == "job-gpus-unused"] == []


def test_allocated_is_not_used_without_the_scheduler_the_gpus_alone_say_nothing() -> None:
    """The same samples without the scheduler's polls: 6 idle GPUs without processes, no alert."""
    eng = Engine()
    recs = [r for r in _held({0: 90.0, 1: 85.0}, 2400) if r.schema_ == "node_snapshot/2"]
    assert [t for t in run(eng, recs) + eng.flush() if t.rule == "job-gpus-unused"] == []


def test_dump_and_load_halfway_gives_the_same_transitions() -> None:
    recs = _held({0: 90.0}, 2400)  # both the scheduler stage and stage 1 hold state halfway
    whole = Engine()
    want = [encode(t) for t in run(whole, recs) + whole.flush()]
    first = Engine()
    got = [encode(t) for t in run(first, recs[: len(recs) // 2])]
    second = Engine()
    second.load_all(first.dump_all())
    got += [encode(t) for t in run(second, recs[len(recs) // 2:]) + second.flush()]
    assert got == want and [json.loads(t)["state"] for t in want] == ["firing", "resolved"]


def test_late_incomplete_and_error_polls_change_nothing() -> None:
    stage = SchedulerStage(EngineConfig())
    first = poll(T, [job("1", S.PENDING, T, submit=T - 10)], [node("gn1", T, 4, 0)])
    for r in first:
        stage.process(r)
    assert stage.figures(CLUSTER).pending == 1
    for r in first:  # the same poll again: late
        stage.process(r)
    lost = poll(T + 30, [job("1", S.PENDING, T + 30), job("2", S.PENDING, T + 30)], [node("gn1", T + 30, 4, 0)])
    for r in lost[1:]:  # a job record lost: the poll says 2 jobs, 1 came
        stage.process(r)
    err = poll(T + 60, [], [])[-1].model_copy(update={"error": "squeue: timeout"})
    stage.process(err)
    assert stage.figures(CLUSTER).ts == T and stage.figures(CLUSTER).pending == 1
    assert stage.counters() == {"scheduler_late": 3, "scheduler_incomplete": 1}


def test_a_malformed_scheduler_record_goes_to_the_dead_letter_topic_with_its_reason() -> None:
    topics = Topics()
    task = ClusterTask(TaskId("cluster", 0), topics, EngineConfig(), Limits(), stage=SchedulerStage(EngineConfig()),
                       allocation_partitions=2)
    good = poll(T, [job("1", S.PENDING, T, submit=T - 10, gpus=4)], [node("gn1", T, 4, 0)])
    bad = b'{"schema":"scheduler_job/1","ts":1700000000,"cluster":"lab","scheduler":"slurm","job_id":"2",' \
          b'"state":"pending","gpus":-4}'
    msgs = [Inbound(topics.jobs, 0, 0, CLUSTER.encode(), bad),
            *(Inbound(topics.jobs, 0, i + 1, CLUSTER.encode(), encode(r)) for i, r in enumerate(good)),
            Inbound(topics.jobs, 0, 9, b"other", encode(good[0]))]  # on the wrong key
    out = task.apply(Batch({topics.jobs: msgs}, frozenset(), T + 1))
    dead = [decode(o.value, DeadLetter) for o in out if o.topic == "scheduler.jobs.dlq"]
    assert [d.offset for d in dead] == [0, 9] and task.runner.dead == 2
    assert "gpus" in dead[0].error and "key" in dead[1].error
    assert CLUSTER in task.runner.snapshot()  # the stage's state, under its cluster
    reports = task.reports(0.0)  # its progress to both scheduler.allocations partitions
    assert sorted(o.partition for o in reports) == [0, 1] and all(o.topic == topics.allocations for o in reports)


def test_unknown_scheduler_config_keys_are_errors() -> None:
    with pytest.raises(ConfigError, match=r"scheduler\.fragmentaton_for.*fragmentation_for"):
        validate(EngineConfig, {"scheduler": {"fragmentaton_for": "5m"}}, "gw.yaml")


def test_replay_of_a_recorded_run_gives_its_scheduler_alerts_again(tmp_path) -> None:
    """Live (`gpuwarden run --record`) and replay (`--from-file`, `--spool`) byte-identical: the
    replay sources read ``scheduler.jobs`` too."""
    import subprocess
    import sys

    cfg = tmp_path / "gw.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\n")
    cli = [sys.executable, "-m", "gpuwarden.app.cli"]
    live = subprocess.run([*cli, "run", "--config", str(cfg), "--simulate", "fragmentation", "--duration", "15m",
                           "--start", "1700000000", "--json", "--record", str(tmp_path / "in.jsonl")],
                          capture_output=True, timeout=120, check=True).stdout
    assert b'"rule":"scheduler-fragmentation"' in live
    for source in (["--from-file", str(tmp_path / "in.jsonl")], ["--spool", str(tmp_path / "spool.db")]):
        replay = subprocess.run([*cli, "replay", "--config", str(cfg), *source, "--json"], capture_output=True,
                                timeout=120, check=True).stdout
        assert replay == live, source


def test_a_pod_whose_allocation_names_no_gpus_is_judged_on_the_gpus_its_processes_hold() -> None:
    """Kubernetes says how many GPUs a pod holds, not which: its processes (pod name and
    namespace, the collector's job id ``namespace/name``) say which."""
    from gpuwarden.contract import GpuProcess, GpuSample, NodeCapacity, NodeSnapshot, SchedulerJob, SchedulerPoll

    eng, recs = Engine(), []
    for k in range(0, 2100, 5):
        ts = T + k
        rows = [GpuSample(index=i, uuid=f"GPU-{i}", util_gpu=(90.0 if i == 0 else 0.0)) for i in range(4)]
        procs = [GpuProcess(pid=10 + i, gpu_index=i, pod_name="eval-7f9c", pod_namespace="ml") for i in (0, 1)]
        recs.append(NodeSnapshot.of(node="k8s-n1", ts=ts, seq=k, boot_id="b", agent_version="t", gpus=rows,
                                    processes=procs))
        if k % 30 == 0:
            recs += [SchedulerJob(ts=ts, cluster="kube", scheduler="kubernetes", job_id="ml/eval-7f9c", user="ml",
                                  state=S.RUNNING, gpus=2, nodes=["k8s-n1"], start_time=T - 5),
                     NodeCapacity(ts=ts, cluster="kube", scheduler="kubernetes", node="k8s-n1", gpus_total=4,
                                  gpus_allocated=2),
                     SchedulerPoll(ts=ts, cluster="kube", scheduler="kubernetes", jobs=1, nodes=1)]
    trs = [t for t in run(eng, recs) if t.rule == "job-gpus-unused"]
    assert fired(trs) == [("job-gpus-unused", "firing", 460.0)]  # 1810 before unused_for 7.5 min (#30)
    assert trs[0].evidence.values == {"allocated": 2.0, "busy": 1.0, "idle": 1.0}


def test_resolves_say_the_figures_at_resolution_not_the_firings() -> None:
    """Issue #19: a scheduler alert's resolve is filled with what was measured when it ended."""
    eng = Engine()
    frag = run(eng, fragmented_polls(0, 1200, big_starts=900))
    assert [t.state.value for t in frag] == ["firing", "resolved"]
    assert frag[1].summary == "job 3 (alice, gpu) is no longer held by fragmentation: 2 GPUs free in its " \
                              "partition, at most 2 on one node"  # job 3 took gn1's 4
    assert frag[1].evidence.note == "the job started" and frag[1].evidence.held_for_s == 300.0
    assert frag[0].evidence.values == {"gpus": 4.0, "free": 4.0}
    cfg = EngineConfig.model_validate({"scheduler": {"period": "60s", "wait_periods": 3, "wait_min": "5m",
                                                     "wait_baseline_min": 10}})
    eng = Engine(config=cfg)
    drained = [p for t in range(1800, 2000, 30) for p in poll(T + t, [], [node("gn1", T + t, 4, 0)])]
    wait = run(eng, _waits(12, 900, 1800) + drained)  # the stuck job is cancelled at 1800
    assert [(t.state.value, t.ts - T) for t in wait] == [("firing", 1410.0), ("resolved", 1800.0)]
    assert wait[0].summary == "gpu jobs asking for 1 GPUs wait 8 min 30 s (median of 1 pending) against a usual 1 min"
    assert wait[1].summary == "gpu jobs asking for 1 GPUs: wait back to 0 s (median of 0 pending) against a " \
                              "usual 1 min"
    eng = Engine()
    unused = [t for t in run(eng, _held({0: 90.0, 1: 85.0}, 2400, until_busy=2100)) + eng.flush()
              if t.rule == "job-gpus-unused"]
    assert [t.state.value for t in unused] == ["firing", "resolved"]
    assert unused[0].evidence.values["busy"] == 2.0 and unused[1].evidence.values["busy"] == 8.0
    assert unused[1].summary == "job 77 (alice) holds 8 GPUs on node-00 and uses 8 of them now"
