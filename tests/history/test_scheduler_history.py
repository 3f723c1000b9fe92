"""Real queue history: 1,455 Philly jobs (../shared/data) through ``import-jobs`` and ``report scheduler``,
checked against figures computed here independently from the file (numpy's percentiles, datetime)."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from tests.history.builders import config, gw

#: ../shared/data's file, copied unchanged (tests/fixtures/philly/README.md: source and license).
PHILLY = Path(__file__).resolve().parents[1] / "fixtures" / "philly" / "philly-jobs-2017-09-10.jsonl"


def _utc(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()


def _independent(jobs: list[dict]) -> dict:
    waits = [_utc(j["attempts"][0]["start_time"]) - _utc(j["submitted_time"]) for j in jobs if j["attempts"]]
    return {
        "jobs": len(jobs),
        "attempts": sum(len(j["attempts"]) for j in jobs),
        "retried_jobs": sum(len(j["attempts"]) > 1 for j in jobs),
        "queue_wait_p50_s": float(np.percentile(waits, 50)) if waits else None,
        "queue_wait_p90_s": float(np.percentile(waits, 90)) if waits else None,
        "gpu_hours": sum(j["num_gpus"] * (_utc(a["end_time"]) - _utc(a["start_time"])) / 3600
                         for j in jobs for a in j["attempts"]),
    }


def _close(got: dict, want: dict) -> None:
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-3, rel=1e-9), k


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("philly")
    cfg = config(tmp, extra="")
    Path(cfg).write_text(Path(cfg).read_text().replace("spool:\n", "spool:\n  max_age: 5000d\n"))
    imported = gw("import-jobs", "--config", cfg, "--format", "philly", "--cluster", "philly", str(PHILLY))
    assert imported.returncode == 0, imported.stderr
    assert "imported 1455 jobs (2383 records)" in imported.stderr
    out = gw("report", "--config", cfg, "scheduler", "--since", "2017-09-01", "--until", "2017-12-01",
             "--by", "gpus", "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_philly_totals_equal_an_independent_computation(report: dict) -> None:
    jobs = [json.loads(line) for line in PHILLY.read_text().splitlines() if line.strip()]
    want = _independent(jobs)
    _close(report["total"], want)
    # The facts ../shared/data/README.md states: median wait ~25 s, p90 ~54 min, 35 % retried.
    assert 20 < report["total"]["queue_wait_p50_s"] < 30 and 50 * 60 < report["total"]["queue_wait_p90_s"] < 56 * 60
    assert round(report["total"]["retried_jobs"] / report["total"]["jobs"], 2) == 0.35


def test_each_gpu_count_row_equals_an_independent_computation(report: dict) -> None:
    by = defaultdict(list)
    for line in PHILLY.read_text().splitlines():
        if line.strip():
            j = json.loads(line)
            by[str(j["num_gpus"])].append(j)
    assert [r["key"] for r in report["rows"]] == sorted(by, key=int)
    for row in report["rows"]:
        _close(row, _independent(by[row["key"]]))


def test_times_without_a_zone_are_read_in_the_given_zone(tmp_path: Path) -> None:
    log = tmp_path / "one.jsonl"
    log.write_text(json.dumps({"id": "j1", "num_gpus": 2, "submitted_time": "2017-09-04 10:00:00",
                               "attempts": [{"start_time": "2017-09-04 10:00:30",
                                             "end_time": "2017-09-04 11:00:30"}]}) + "\n")
    spans = {}
    for zone in ("UTC", "America/Los_Angeles"):
        cfg = config(tmp_path / zone.replace("/", "-"))
        assert gw("import-jobs", "--config", cfg, "--format", "philly", "--timezone", zone, str(log)).returncode == 0
        # The job ends 11:00:30 in that zone: inside a UTC period ending at 12:00 only when read as UTC.
        out = gw("report", "--config", cfg, "scheduler", "--since", "2017-09-04T00:00:00", "--until",
                 "2017-09-04T12:00:00", "--format", "json")
        spans[zone] = json.loads(out.stdout)["total"]
    assert spans["UTC"]["jobs"] == 1 and spans["UTC"]["gpu_hours"] == 2.0 and spans["UTC"]["queue_wait_p50_s"] == 30
    assert spans["America/Los_Angeles"]["jobs"] == 0


def test_a_bad_line_is_named_with_its_file_and_number(tmp_path: Path) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text('{"id": "ok", "num_gpus": 1, "submitted_time": "2017-09-04 10:00:00", "attempts": []}\n'
                   '{"id": "broken", "num_gpus": 1}\n')
    out = gw("import-jobs", "--config", config(tmp_path), "--format", "philly", str(log))
    assert out.returncode == 1 and f"{log}:2: KeyError" in out.stderr, out.stderr
