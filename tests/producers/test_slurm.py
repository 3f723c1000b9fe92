"""The Slurm collector against a real Slurm (scripts/slurm-local: two nodes of 4 GPUs): running,
pending for Resources and for Priority, requeued, fragmentation across the two nodes, and a
Slurm that stops answering mid-run and comes back."""

from __future__ import annotations

import asyncio
import time

import pytest

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob, SchedulerPoll, decode, encode
from gpuwarden.producers.scheduler import Collector
from gpuwarden.producers.slurm import SlurmCli, expand_hostlist, jobs, nodes, parse_gres
from tests.slurm_support import LocalSlurm

CLUSTER = "local"


def _poll(slurm: LocalSlurm) -> tuple[dict[str, SchedulerJob], dict[str, NodeCapacity]]:
    js, ns = asyncio.run(SlurmCli(env=slurm.env).poll(CLUSTER, time.time()))
    for r in (*js, *ns):
        assert decode(encode(r)) == r  # every record is valid on the wire
    return {j.job_id: j for j in js}, {n.node: n for n in ns}


@pytest.mark.slurm
def test_running_pending_and_fragmentation_as_slurm_shows_them(slurm: LocalSlurm) -> None:
    a, b, big, later = slurm.fragment()
    got, capacity = _poll(slurm)
    assert got[a].state is JobState.RUNNING and got[a].nodes == ["gn1"] and got[a].gpu_indices == {"gn1": [0, 1]}
    assert got[a].gpus == 2 and got[a].gpu_type == "h200" and got[a].name == "train-a" and got[a].queue == "gpu"
    assert got[a].start_time and got[a].submit_time and got[a].end_time is None and got[a].exit_code is None
    assert got[b].nodes == ["gn2"] and got[b].gpu_indices == {"gn2": [0, 1]}
    assert got[big].state is JobState.PENDING and got[big].reason == "Resources" and got[big].gpus == 4
    assert got[big].nodes == [] and got[big].start_time is None
    assert got[later].state is JobState.PENDING and got[later].reason == "Priority"
    # Fragmentation, for real: 4 GPUs free in total, no node with the 4 the pending job needs.
    assert {n: (c.gpus_total, c.gpus_allocated) for n, c in capacity.items()} == {"gn1": (4, 2), "gn2": (4, 2)}
    assert all(c.partitions == ["gpu"] and c.gpu_type == "h200" for c in capacity.values())
    slurm.cancel_all()


@pytest.mark.slurm
def test_a_requeued_job_waits_again_with_its_restart_counted(slurm: LocalSlurm) -> None:
    slurm.cancel_all()
    job = slurm.sbatch("-J", "requeued", "--gres=gpu:1")
    slurm.wait_state(job, "RUNNING")
    slurm.run("scontrol", "requeue", job)
    got, _ = _poll(slurm)
    # Requeued: pending again (reason BeginTime), or already running again on a free node.
    assert got[job].restarts == 1 and got[job].state in (JobState.PENDING, JobState.RUNNING)
    slurm.cancel_all()


@pytest.mark.slurm
async def test_a_slurm_that_stops_answering_is_retried_with_backoff_and_recovers(own_slurm: LocalSlurm) -> None:
    records: list = []
    collector = Collector(SlurmCli(timeout_s=10, env=own_slurm.env), CLUSTER, "slurm", records.extend,
                          interval_s=0.2, max_backoff_s=1.0)
    assert await collector.poll_once()
    own_slurm.stop()
    assert not await collector.poll_once()
    assert not await collector.poll_once()
    polls = [r for r in records if isinstance(r, SchedulerPoll)]
    assert [bool(p.error) for p in polls] == [False, True, True] and " --json: " in polls[-1].error
    assert collector.counts.errors == 2 and collector.counts.failing_since is not None
    assert [collector.delay(n) for n in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    own_slurm.start()
    stop = asyncio.Event()
    task = asyncio.create_task(collector.run(stop))
    deadline = time.monotonic() + 300  # returns once it answers: the bound only catches a hang (#33)
    while collector.counts.failing_since is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    stop.set()
    await task
    assert collector.counts.failing_since is None  # answering again, and the collector never stopped
    last = [r for r in records if isinstance(r, SchedulerPoll)][-1]
    assert not last.error and last.nodes == 2


def test_slurm_text_forms() -> None:
    assert expand_hostlist("gn[1-3,5],login1,n[01-02]") == ["gn1", "gn2", "gn3", "gn5", "login1", "n01", "n02"]
    assert parse_gres("gpu:h200:2(IDX:0-1,3)") == (2, "h200", [0, 1, 3])
    assert parse_gres("gres:gpu:4") == (4, "", [])
    assert parse_gres("tmp:1,gpu:a100:8(S:0-1)") == (8, "a100", [])
    assert parse_gres("") == (0, "", [])


def test_newer_slurm_json_numbers_and_a_multi_node_job() -> None:
    """Slurm 23.02+ nests numbers (``{"set": true, "number": n}``) and exit codes; a job over
    two nodes lists its GRES per node."""
    doc = {"jobs": [{
        "job_id": 7, "name": "ddp", "user_name": "chen", "account": "fm", "partition": "gpu",
        "job_state": ["COMPLETED"], "state_reason": "None", "node_count": {"set": True, "number": 2},
        "submit_time": {"set": True, "number": 100}, "start_time": {"set": True, "number": 160},
        "end_time": {"set": True, "number": 900}, "tres_per_node": "gres:gpu:h100:4", "nodes": "gn[1-2]",
        "gres_detail": ["gpu:h100:4(IDX:0-3)", "gpu:h100:4(IDX:4-7)"], "restart_cnt": 0,
        "exit_code": {"status": ["SUCCESS"], "return_code": {"set": True, "number": 0}},
        "array_task_id": {"set": False, "number": 0},
    }]}
    (job,) = jobs(doc, CLUSTER, 1000.0)
    assert job.state is JobState.COMPLETED and job.gpus == 8 and job.gpu_type == "h100"
    assert job.gpu_indices == {"gn1": [0, 1, 2, 3], "gn2": [4, 5, 6, 7]} and job.exit_code == 0
    assert (job.submit_time, job.start_time, job.end_time) == (100.0, 160.0, 900.0)
    (node,) = nodes({"nodes": [{"name": "gn1", "state": ["MIXED", "DRAIN"], "gres": "gpu:h100:8",
                                "gres_used": "gpu:h100:3(IDX:0-2)", "partitions": ["gpu"]}]}, CLUSTER, 1000.0)
    assert (node.gpus_total, node.gpus_allocated, node.state) == (8, 3, "mixed+drain")


@pytest.mark.slurm
def test_the_scheduler_command_writes_a_poll_to_a_file(slurm: LocalSlurm, tmp_path) -> None:
    import os
    import subprocess
    import sys

    slurm.cancel_all()
    job = slurm.sbatch("-J", "cli", "--gres=gpu:1")
    slurm.wait_state(job, "RUNNING")
    out = tmp_path / "jobs.jsonl"
    proc = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "scheduler", "--slurm", "--cluster", "lab",
                           "--output", str(out), "--polls", "1"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **slurm.env})
    assert proc.returncode == 0, proc.stderr
    records = [decode(line) for line in out.read_text().splitlines()]
    # The jobs (earlier tests' cancelled ones too: Slurm lists ended jobs for MinJobAge), the nodes, the poll.
    kinds = [type(r).__name__ for r in records]
    assert kinds[-3:] == ["NodeCapacity", "NodeCapacity", "SchedulerPoll"] and set(kinds[:-3]) == {"SchedulerJob"}
    live = {r.job_id: r.state for r in records[:-3] if r.state is not JobState.CANCELLED}
    assert live == {job: JobState.RUNNING} and records[-1].jobs == len(records) - 3
    assert {r.cluster for r in records} == {"lab"}
    slurm.cancel_all()


def test_an_unreadable_kubeconfig_fails_at_start_saying_so(tmp_path) -> None:
    import subprocess
    import sys

    bad = tmp_path / "kubeconfig"
    bad.write_text("not: [a kubeconfig")
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(f"scheduler:\n  kubeconfig: {bad}\n")
    proc = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "scheduler", "--kubernetes", "--config", str(cfg),
                           "--output", str(tmp_path / "o.jsonl"), "--polls", "1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "cannot configure the Kubernetes client" in proc.stderr, proc.stderr
