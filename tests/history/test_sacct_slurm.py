"""``import-jobs --format sacct`` on a real Slurm's accounting (scripts/slurm-local start --accounting:
slurmdbd on a local MariaDB): real jobs submitted with sbatch (completed, failed with exit 3,
requeued, cancelled while running and while held, one on 2 GPUs), their ``sacct --json`` imported,
and ``report scheduler``'s figures checked against a computation made here from the raw JSON."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuwarden.contract import JobState, SchedulerJob, decode
from gpuwarden.spool import Spool
from tests.history.builders import config, gw
from tests.history.test_sacct import independent
from tests.slurm_support import LocalSlurm


def _wait_accounted(slurm: LocalSlurm, ids: list[str], timeout: float = 300) -> dict:  # a hang bound
    """``sacct --json --duplicates`` once every job has ended and its end reached the database."""
    deadline = time.monotonic() + timeout
    while True:
        doc = json.loads(slurm.run("sacct", "--json", "--duplicates", "-j", ",".join(ids)))
        open_ = {str(e["job_id"]) for e in doc["jobs"] if e["state"]["current"] in ("PENDING", "RUNNING")
                 or not e["time"]["end"]}
        seen = {str(e["job_id"]) for e in doc["jobs"]}
        queued = set(slurm.run("squeue", "-h", "-o", "%i").split())
        if seen == set(ids) and not open_ and not queued & set(ids):
            return doc
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs {sorted(open_ | queued | (set(ids) - seen))} not ended in sacct "
                               f"within {timeout:.0f} s")
        time.sleep(0.5)


@pytest.mark.slurm
def test_real_sacct_history_gives_the_report_an_independent_computation_gives(
        accounting_slurm: LocalSlurm, tmp_path: Path) -> None:
    s = accounting_slurm
    ok = s.sbatch("-J", "ok", "--gres=gpu:1", wrap="sleep 2")
    bad = s.sbatch("-J", "bad", "--gres=gpu:1", wrap="sleep 1; exit 3")
    two = s.sbatch("-J", "two", "--gres=gpu:2", wrap="sleep 3")
    rq = s.sbatch("-J", "rq", "--gres=gpu:1", wrap="sleep 4")
    cx = s.sbatch("-J", "cx", "--gres=gpu:1", wrap="sleep 300")
    held = s.sbatch("-J", "held", "--hold", "--gres=gpu:1", wrap="sleep 1")
    s.wait_state(rq, "RUNNING")
    s.wait_state(cx, "RUNNING")
    first_node = s.run("squeue", "-h", "-j", rq, "-o", "%N").strip()
    s.run("scontrol", "requeue", rq)
    s.wait_state(rq, "PENDING")
    # Else it waits ~2 min (BeginTime); on its first node its old credential is still revoked.
    s.run("scontrol", "update", f"jobid={rq}", "StartTime=now", f"ExcNodeList={first_node}")
    s.run("scancel", cx, held)
    ids = [ok, bad, two, rq, cx, held]
    doc = _wait_accounted(s, ids)
    # The job really exited 3, as sacct's text says; 22.05.8's JSON says 0 (history/sacct.py).
    assert s.run("sacct", "-n", "-X", "-P", "-o", "ExitCode", "-j", bad).split() == ["3:0"]

    export = tmp_path / "sacct.json"
    export.write_text(json.dumps(doc))
    cfg = config(tmp_path / "gw")
    imported = gw("import-jobs", "--config", cfg, "--format", "sacct", str(export))
    assert imported.returncode == 0, imported.stderr
    assert f"imported 6 jobs ({len(doc['jobs'])} records)" in imported.stderr
    out = gw("report", "--config", cfg, "scheduler", "--by", "gpus", "--format", "json")
    assert out.returncode == 0, out.stderr
    total = json.loads(out.stdout)["total"]

    want = independent(doc["jobs"])
    assert (want["jobs"], want["attempts"], want["retried_jobs"]) == (6, 6, 1)  # held never ran; rq ran twice
    for key in ("jobs", "attempts", "retried_jobs", "queue_wait_p50_s", "queue_wait_p90_s"):
        assert total[key] == pytest.approx(want[key]), key
    assert total["gpu_hours"] == pytest.approx(want["gpu_hours"])  # JSON keeps full precision

    with Spool(Path(cfg).parent / "spool" / "spool.db") as spool:
        records = [r for r in map(decode, (row.value for row in spool.read())) if isinstance(r, SchedulerJob)]
    got = {(r.job_id, r.restarts): r for r in records}
    assert got[ok, 0].state is JobState.COMPLETED and got[ok, 0].exit_code == 0 and got[ok, 0].nodes
    assert got[bad, 0].state is JobState.FAILED
    assert got[two, 0].gpus == 2 and got[ok, 0].gpus == 1
    assert got[rq, 0].reason == "requeued" and got[rq, 0].end_time and got[rq, 1].state is JobState.COMPLETED
    assert got[rq, 1].submit_time == got[rq, 0].submit_time  # the job's first submission, not the requeue's
    assert got[cx, 0].state is JobState.CANCELLED and got[cx, 0].start_time
    assert got[held, 0].state is JobState.CANCELLED and got[held, 0].start_time is None and got[held, 0].nodes == []
    assert {r.account for r in records} == {"lab"} and {r.cluster for r in records} == {"gpuwarden-local"}
