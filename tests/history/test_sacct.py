"""``import-jobs --format sacct`` on a real ``sacct --json`` (tests/fixtures/sacct: Slurm 22.05.8 with
slurmdbd; completed, failed, requeued, cancelled, array, 2-node, running and pending jobs), checked
against the same jobs in sacct's text form and against figures computed here from the raw JSON;
the 23.02+ shapes; malformed input named down to the field, with nothing imported."""

from __future__ import annotations

import copy
import json
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuwarden.contract import JobState, SchedulerJob, decode
from gpuwarden.history.sacct import SacctError, read_file, records
from gpuwarden.spool import Spool
from tests.history.builders import config, gw

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sacct"
JSON_FILE, TEXT_FILE = FIXTURES / "sacct-22.05.8.json", FIXTURES / "sacct-22.05.8.txt"


def independent(entries: list[dict[str, Any]], since: float = 0.0, until: float = math.inf) -> dict[str, Any]:
    """The report's figures for ``[since, until)`` from sacct's raw 22.05 entries, read here without
    the importer's code: an entry ran when nodes were assigned, a running one ends at start +
    elapsed; a run belongs to the period when it overlaps it (one of no length: when it started
    inside), a job that never ran when it ended (cancelled) or was submitted (pending) inside."""
    by_job: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        task = e["array"]["task_id"]
        by_job.setdefault(f"{e['array']['job_id']}_{task}" if task is not None else str(e["job_id"]), []).append(e)
    runs: dict[str, list[tuple[float, float, int]]] = {}  # job → (start, end, GPUs) of its runs in the period
    waits, jobs = [], 0
    for job, es in by_job.items():
        ran = [e for e in es if e["nodes"] != "None assigned"]
        for e in ran:
            start = e["time"]["start"]
            end = e["time"]["end"] or start + e["time"]["elapsed"]
            if start < until and (end > since or start >= since):
                gpus = sum(t["count"] for t in e["tres"]["allocated"] if t["type"] == "gres" and t["name"] == "gpu")
                runs.setdefault(job, []).append((max(start, since), min(end, until), gpus))
        waited = [e for e in es if e not in ran and since <= (e["time"]["end"] or e["time"]["submission"]) < until]
        if job in runs or waited:
            jobs += 1
            if ran:
                waits.append(min(e["time"]["start"] for e in ran) - min(e["time"]["submission"] for e in es))
    return {
        "jobs": jobs,
        "attempts": sum(len(r) for r in runs.values()),
        "retried_jobs": sum(len(r) > 1 for r in runs.values()),
        "queue_wait_p50_s": float(np.percentile(waits, 50)) if waits else None,
        "queue_wait_p90_s": float(np.percentile(waits, 90)) if waits else None,
        "gpu_hours": sum(g * (b - a) for r in runs.values() for a, b, g in r) / 3600,
    }


def _text_rows() -> list[dict[str, str]]:
    """The text listing's job lines (not their steps), in order."""
    lines = TEXT_FILE.read_text().splitlines()
    names = lines[0].split()
    rows = [dict(zip(names, line.split())) for line in lines[2:]]
    for r in rows:  # "None assigned" is two words: the NodeList of a job that never ran
        if r["NodeList"] == "None":
            r["NodeList"], r["AllocTRES"] = "None assigned", ""
    return [r for r in rows if "." not in r["JobID"]]


def _utc(text: str) -> float | None:
    if text in ("Unknown", "None"):
        return None
    return datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()


@pytest.fixture(scope="module")
def spool_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A config whose spool holds the fixture, imported through the real command line."""
    cfg = config(tmp_path_factory.mktemp("sacct"), extra="")
    Path(cfg).write_text(Path(cfg).read_text().replace("spool:\n", "spool:\n  max_age: 5000d\n"))
    imported = gw("import-jobs", "--config", cfg, "--format", "sacct", str(JSON_FILE))
    assert imported.returncode == 0, imported.stderr
    assert "imported 10 jobs (11 records)" in imported.stderr
    return cfg


def _report(cfg: str, since: str, until: str) -> dict[str, Any]:
    out = gw("report", "--config", cfg, "scheduler", "--since", since, "--until", until, "--by", "gpus",
             "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["total"]


def _equal(total: dict[str, Any], want: dict[str, Any]) -> None:
    for key in ("jobs", "attempts", "retried_jobs", "queue_wait_p50_s", "queue_wait_p90_s"):
        assert total[key] == pytest.approx(want[key]), key
    assert total["gpu_hours"] == round(want["gpu_hours"], 3)


def test_the_report_equals_an_independent_computation(spool_config: str) -> None:
    want = independent(json.loads(JSON_FILE.read_text())["jobs"])
    # 10 jobs; 10 runs (rq twice, the pending one none); 1 retried.
    assert (want["jobs"], want["attempts"], want["retried_jobs"]) == (10, 10, 1)
    _equal(_report(spool_config, "2026-12-01", "2026-12-02"), want)


def test_each_record_agrees_with_sacct_text() -> None:
    got = read_file(JSON_FILE, cluster=None)
    rows = _text_rows()
    assert [(r.job_id, r.restarts) for r in got] == [
        ("4", 0), ("4", 1), ("1", 0), ("2", 0), ("3", 0), ("5", 0), ("7_1", 0), ("8", 0), ("7_0", 0), ("10", 0),
        ("11", 0)]
    assert sorted({r.job_id for r in got}) == sorted({r["JobID"] for r in rows})
    # The text lists a job's runs in the JSON's order per job (the requeued run first).
    text_runs: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        text_runs.setdefault(row["JobID"], []).append(row)
    for r in got:
        row = text_runs[r.job_id][r.restarts]
        ran = row["NodeList"] != "None assigned"
        assert r.start_time == (_utc(row["Start"]) if ran else None), r.job_id
        assert r.end_time == _utc(row["End"]), r.job_id
        assert r.gpus == (int(row["AllocTRES"].split("gres/gpu=")[1].split(",")[0]) if ran else 4), r.job_id
        assert r.nodes == ({"gn[1-2]": ["gn1", "gn2"]}.get(row["NodeList"], [row["NodeList"]]) if ran else [])
        assert r.state.value == row["State"].rstrip("+").lower() or (row["State"] == "REQUEUED" and r.state is
                                                                       JobState.UNKNOWN and r.reason == "requeued")
        assert r.account == "lab" and r.cluster == "gpuwarden-local" and r.queue == "gpu" and r.user == "root"
    by = {(r.job_id, r.restarts): r for r in got}
    assert by["4", 1].submit_time == by["4", 0].submit_time == _utc(text_runs["4"][0]["Submit"])
    assert by["4", 1].eligible_time > by["4", 0].eligible_time  # each run's own
    assert by["10", 0].ts == by["10", 0].start_time + 5 and by["10", 0].end_time is None  # running: start + elapsed
    assert by["11", 0].state is JobState.PENDING and by["11", 0].ts == by["11", 0].submit_time
    # The job exited 3 (text: 3:0); Slurm 22.05.8's JSON says 0, and that is what is recorded.
    assert text_runs["2"][0]["ExitCode"] == "3:0" and by["2", 0].state is JobState.FAILED and by["2", 0].exit_code == 0
    assert by["5", 0].exit_code == 0 and by["10", 0].exit_code is None and by["11", 0].exit_code is None


@pytest.mark.parametrize(("since", "until"), [
    ("2026-12-01T13:56:44", "2026-12-01T13:56:46"),  # inside several runs: each clipped to the period
    ("2026-12-01T13:56:46", "2026-12-01T13:56:58"),  # the requeued job's second run, the running one's start
    ("2026-12-01T13:56:59", "2026-12-01T13:57:30"),  # the running job and the pending one only
    ("2026-12-01T14:00:00", "2026-12-01T15:00:00"),  # after the export: the running job (ends at its record)
])
def test_since_and_until_report_the_period_as_an_independent_computation(
        spool_config: str, since: str, until: str) -> None:
    want = independent(json.loads(JSON_FILE.read_text())["jobs"], _utc(since), _utc(until))  # type: ignore[arg-type]
    _equal(_report(spool_config, since, until), want)


def _nested(v: Any) -> dict[str, Any]:
    return {"set": v is not None, "infinite": False, "number": v or 0}


def test_the_23_02_shapes_give_the_same_records() -> None:
    """Slurm 23.02+ nests numbers as {"set", "infinite", "number"}, lists the state with its flags
    and nests the exit code's return code: read the same."""
    doc = json.loads(JSON_FILE.read_text())
    new = copy.deepcopy(doc)
    for e in new["jobs"]:
        for k in ("submission", "eligible", "start", "end", "elapsed"):
            e["time"][k] = _nested(e["time"][k])
        e["state"]["current"] = [e["state"]["current"]]
        e["exit_code"] = {"status": ["EXITED"], "return_code": _nested(e["exit_code"]["return_code"])}
        e["array"]["task_id"] = _nested(e["array"]["task_id"])
        for t in e["tres"]["allocated"]:
            t["count"] = _nested(t["count"])
    assert records(new, cluster=None) == records(doc, cluster=None)


def _broken(change: str) -> dict[str, Any]:
    doc = json.loads(JSON_FILE.read_text())
    job = doc["jobs"][1]  # job 1, "ok"
    if change == "time":
        job["time"]["start"] = "2026-12-01T13:56:43"
    elif change == "id":
        del job["job_id"]
    elif change == "gpus":
        job["tres"]["allocated"][4]["count"] = "two"
    elif change == "state":
        job["state"]["current"] = ""
    elif change == "name":
        job["name"] = 7
    elif change == "nodes":
        job["nodes"] = "gn[a-b]"
    return doc


@pytest.mark.parametrize(("change", "message"), [
    ("time", "jobs[1] (job 1): time.start: expected epoch seconds (a number, or"),
    ("id", "jobs[1]: job_id: expected the job's number, got None"),
    ("gpus", "jobs[1] (job 1): tres.allocated[4].count: expected a number"),
    ("state", "jobs[1] (job 1): state.current: expected a Slurm job state such as COMPLETED, got ''"),
    ("name", "jobs[1] (job 1): name: expected a string, got 7"),
    ("nodes", "jobs[1] (job 1): nodes: expected a Slurm host list such as gn[1-2], got 'gn[a-b]'"),
])
def test_a_malformed_entry_is_named_down_to_its_field(change: str, message: str) -> None:
    with pytest.raises(SacctError) as e:
        records(_broken(change), cluster=None, source="export.json")
    assert str(e.value).startswith(f"export.json: {message}"), str(e.value)


@pytest.mark.parametrize(("text", "message"), [
    ('{"jobs": [', "not JSON (line 1, column 11: Expecting value): expected the output of `sacct --json`"),
    ('{"meta": {}}', "no list under 'jobs': expected the output of `sacct --json`"),
    ('{"jobs": [], "errors": [{"error": "Unable to connect to database"}]}', "sacct reported errors"),
    ('{"jobs": [3]}', "jobs[0]: expected an object (one job), got 3"),
])
def test_a_file_that_is_not_sacct_json_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "export.json"
    path.write_text(text)
    with pytest.raises(SacctError) as e:
        read_file(path, cluster=None)
    assert str(e.value).startswith(f"{path}: {message}"), str(e.value)


def test_a_bad_entry_imports_nothing(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = _broken("time")
    doc["jobs"].append(copy.deepcopy(doc["jobs"][2]))  # good entries before and after the bad one
    path.write_text(json.dumps(doc))
    cfg = config(tmp_path)
    out = gw("import-jobs", "--config", cfg, "--format", "sacct", str(path))
    assert out.returncode == 1 and f"{path}: jobs[1] (job 1): time.start: expected epoch seconds" in out.stderr
    with Spool(tmp_path / "spool" / "spool.db") as spool:
        assert [r for r in map(decode, (row.value for row in spool.read())) if isinstance(r, SchedulerJob)] == []


def test_the_cluster_comes_from_sacct_unless_given() -> None:
    assert {r.cluster for r in read_file(JSON_FILE, cluster=None)} == {"gpuwarden-local"}
    assert {r.cluster for r in read_file(JSON_FILE, cluster="lab-a")} == {"lab-a"}


def test_a_timezone_changes_nothing_and_says_so(tmp_path: Path) -> None:
    cfg = config(tmp_path)
    Path(cfg).write_text(Path(cfg).read_text().replace("spool:\n", "spool:\n  max_age: 5000d\n"))
    out = gw("import-jobs", "--config", cfg, "--format", "sacct", "--timezone", "Asia/Shanghai", str(JSON_FILE))
    assert out.returncode == 0, out.stderr
    assert "--timezone does not apply to sacct JSON (its times are epoch seconds, UTC)" in out.stderr
    with Spool(tmp_path / "spool" / "spool.db") as spool:
        got = [r for r in map(decode, (row.value for row in spool.read())) if isinstance(r, SchedulerJob)]
    assert got == read_file(JSON_FILE, cluster=None)
