"""``gpuwarden report scheduler``: queue waits, attempts and GPU-hours from ``scheduler_job/1`` records.

Records come from the live collector (one per job per poll) or from an imported job log (one per
attempt); both are read the same way: per job and attempt (``restarts``) the newest record holds
the attempt's start and end (a running attempt ends, for the report, at the newest record of it,
clipped to the period). Figures per row and in total:

* ``jobs``; ``attempts``; ``retried_jobs`` (more than one attempt);
* ``queue_wait_p50_s`` / ``queue_wait_p90_s``: first start minus submission, over the jobs that
  started (percentiles with linear interpolation between the two nearest ranks);
* ``gpu_hours``: the sum over attempts of GPUs × the attempt's length.

A job belongs to the period when any record of it does (the spool's event time, ``ts``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from gpuwarden.config import CommonSettings
from gpuwarden.contract import SchedulerJob, Topics, decode
from gpuwarden.history import tables
from gpuwarden.spool import Spool
from gpuwarden.units import parse_time

BY = {"user": lambda j: j.user or "-", "project": lambda j: j.account or "-",
      "partition": lambda j: j.queue or "-", "gpus": lambda j: str(j.gpus)}
COLUMNS = ("jobs", "attempts", "retried_jobs", "queue_wait_p50_s", "queue_wait_p90_s", "gpu_hours")


@dataclass
class QueueRow:
    key: str
    jobs: int = 0
    attempts: int = 0
    retried_jobs: int = 0
    queue_wait_p50_s: float | None = None
    queue_wait_p90_s: float | None = None
    gpu_hours: float = 0.0


@dataclass
class QueueReport:
    by: str
    since: float
    until: float
    rows: list[QueueRow]
    total: QueueRow


def _percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between the two nearest ranks, ``q`` in [0, 1]."""
    if not values:
        return None
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class _Job:
    first: SchedulerJob
    attempts: dict[int, SchedulerJob]


def _jobs(records: Iterable[SchedulerJob]) -> list[_Job]:
    jobs: dict[tuple[str, str], _Job] = {}
    for r in records:
        j = jobs.get((r.cluster, r.job_id))
        if j is None:
            j = jobs[r.cluster, r.job_id] = _Job(r, {})
        last = j.attempts.get(r.restarts)
        if last is None or r.ts >= last.ts:
            j.attempts[r.restarts] = r
    return list(jobs.values())


def _row(key: str, jobs: list[_Job], until: float) -> QueueRow:
    row = QueueRow(key, jobs=len(jobs))
    waits = []
    for j in jobs:
        started = [a for a in j.attempts.values() if a.start_time is not None]
        row.attempts += len(started)
        row.retried_jobs += len(started) > 1
        if started and j.first.submit_time is not None:
            waits.append(min(a.start_time for a in started) - j.first.submit_time)  # type: ignore[type-var]
        for a in started:
            end = min(a.end_time if a.end_time is not None else a.ts, until)
            row.gpu_hours += a.gpus * max(0.0, end - a.start_time) / 3600.0  # type: ignore[operator]
    row.queue_wait_p50_s, row.queue_wait_p90_s = _percentile(waits, 0.5), _percentile(waits, 0.9)
    return row


def compute(records: Iterable[SchedulerJob], *, by: str, since: float, until: float) -> QueueReport:
    jobs = _jobs(records)
    key = BY[by]
    groups: dict[str, list[_Job]] = {}
    for j in jobs:
        groups.setdefault(key(j.first), []).append(j)
    order = sorted(groups, key=lambda k: (int(k), k) if by == "gpus" and k.isdigit() else (0, k))
    return QueueReport(by, since, until, [_row(k, groups[k], until) for k in order], _row("total", jobs, until))


def from_spool(spool: Spool, *, by: str, since: float, until: float, topic_prefix: str = "") -> QueueReport:
    records = []
    for row in spool.read(topic=Topics(topic_prefix).jobs, since=since, until=until):
        r = decode(row.value)
        if isinstance(r, SchedulerJob):
            records.append(r)
    return compute(records, by=by, since=since, until=until)


def _values(r: QueueRow) -> dict[str, Any]:
    d = asdict(r)
    for k in ("queue_wait_p50_s", "queue_wait_p90_s", "gpu_hours"):
        d[k] = None if d[k] is None else round(d[k], 3)
    return d


def render(rep: QueueReport, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"by": rep.by, "since": rep.since, "until": rep.until,
                           "rows": [_values(r) for r in rep.rows], "total": _values(rep.total)}, indent=2) + "\n"
    rows = [(r.key, _values(r)) for r in [*rep.rows, rep.total]]
    if fmt == "csv":
        return tables.to_csv(rep.by, COLUMNS, rows)
    headers = [c.removesuffix("_s").replace("_", " ") for c in COLUMNS]
    cells = [(key, ["-" if v[c] is None else _human(c, v[c]) for c in COLUMNS]) for key, v in rows]
    return tables.to_text(f"Scheduler history by {rep.by}", rep.by, headers, cells)


def _human(col: str, v: float | int) -> str:
    if col.startswith("queue_wait"):
        return human_wait(v)
    return f"{v:.1f}" if isinstance(v, float) else str(v)


def human_wait(v: float) -> str:
    return f"{v:.0f} s" if v < 120 else f"{v / 60:.0f} min" if v < 7200 else f"{v / 3600:.1f} h"


def cmd_report_scheduler(args: argparse.Namespace, settings: CommonSettings) -> int:
    """The table, CSV or JSON on stdout."""
    now = time.time()
    try:
        since = parse_time(args.since, now) or 0.0
        until = parse_time(args.until, now) or now
    except ValueError as e:
        print(f"gpuwarden report scheduler: {e}", file=sys.stderr)
        return 2
    with Spool(settings.spool.path) as spool:
        rep = from_spool(spool, by=args.by, since=since, until=until, topic_prefix=settings.kafka.topic_prefix)
    sys.stdout.write(render(rep, args.format))
    return 0
