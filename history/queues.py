"""``gpuwarden report scheduler``: queue waits, attempts and GPU-hours from ``scheduler_job/1`` records.

Records come from the live collector (one per job per poll) or from an imported job log (one per
attempt, at its end); both are read the same way: per job and attempt (``restarts``) the newest
record holds the attempt's start and end (a running attempt ends, for the report, at the newest
record of it).

The period ``[--since, --until)``: an attempt belongs to it when it ran inside it (started before
``until``, ended after ``since``), a job when any of its attempts does or a record of it not
started is stamped inside it (a job that waited). So an imported attempt that ends after ``until``
still counts, although its one record is stamped at its end. Figures per row and in total:

* ``jobs``; ``attempts`` (those of the period); ``retried_jobs`` (more than one of them);
* ``queue_wait_p50_s`` / ``queue_wait_p90_s``: first start minus submission, over the period's
  jobs that started (percentiles with linear interpolation between the two nearest ranks);
* ``gpu_hours``: the sum over the period's attempts of GPUs × the part of the attempt inside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from gpuwarden.config import CommonSettings
from gpuwarden.contract import SchedulerJob, Topics, decode
from gpuwarden.history import tables
from gpuwarden.humantime import span
from gpuwarden.schedpolls import PollExpander
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
    waits: list[float] = field(default_factory=list)  # ``ts`` of its records not started, in record order


@dataclass(frozen=True)
class _Period:
    since: float
    until: float

    def span(self, a: SchedulerJob) -> tuple[float, float] | None:
        """The part of started attempt ``a`` inside the period; None when it ran wholly outside
        (the attempt taken as ``[start, end)``, so one of no length counts where it started)."""
        start = a.start_time
        if start is None:
            return None
        end = max(a.end_time if a.end_time is not None else a.ts, start)
        if start >= self.until or (end <= self.since and start < self.since):
            return None
        return max(start, self.since), min(end, self.until)

    def waited(self, j: _Job) -> bool:
        """A record of it not started is stamped inside the period (a job that waited)."""
        return any(self.since <= ts < self.until for ts in j.waits)


class JobIndex:
    """Each job's first record, its newest record per attempt and when it was seen waiting: all
    a report of any period needs, so a reader that follows the spool adds only the new records
    (the console) instead of reading the topic again for each report."""

    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], _Job] = {}
        self._polls = PollExpander()

    def add_stored(self, rec: Any) -> None:
        """A record as the spool holds it, in the spool's order (a poll's unchanged jobs stand in
        its ``scheduler_repeat/1``)."""
        for r in self._polls.feed(rec):
            if isinstance(r, SchedulerJob):
                self.add(r)

    def add(self, r: SchedulerJob) -> None:
        j = self.jobs.get((r.cluster, r.job_id))
        if j is None:
            j = self.jobs[r.cluster, r.job_id] = _Job(r, {})
        if r.start_time is None:
            j.waits.append(r.ts)
        last = j.attempts.get(r.restarts)
        if last is None or r.ts >= last.ts:
            j.attempts[r.restarts] = r

    def report(self, *, by: str, since: float, until: float) -> QueueReport:
        """The report of the period's jobs (see :func:`from_spool`)."""
        period = _Period(since, until)
        jobs = [j for j in self.jobs.values() if period.waited(j) or any(map(period.span, j.attempts.values()))]
        key = BY[by]
        groups: dict[str, list[_Job]] = {}
        for j in jobs:
            groups.setdefault(key(j.first), []).append(j)
        order = sorted(groups, key=lambda k: (int(k), k) if by == "gpus" and k.isdigit() else (0, k))
        return QueueReport(by, since, until, [_row(k, groups[k], period) for k in order],
                           _row("total", jobs, period))


def _row(key: str, jobs: list[_Job], period: _Period) -> QueueRow:
    row = QueueRow(key, jobs=len(jobs))
    waits = []
    for j in jobs:
        started = [a for a in j.attempts.values() if a.start_time is not None]
        spans = [(a, s) for a in started if (s := period.span(a)) is not None]
        row.attempts += len(spans)
        row.retried_jobs += len(spans) > 1
        if started and j.first.submit_time is not None:
            waits.append(min(a.start_time for a in started) - j.first.submit_time)  # type: ignore[type-var]
        for a, (start, end) in spans:
            row.gpu_hours += a.gpus * (end - start) / 3600.0
    row.queue_wait_p50_s, row.queue_wait_p90_s = _percentile(waits, 0.5), _percentile(waits, 0.9)
    return row


def from_spool(spool: Spool, *, by: str, since: float, until: float, topic_prefix: str = "") -> QueueReport:
    """Every job record the spool holds: an attempt inside the period may be stamped after
    ``until`` (an imported one at its end), and a job's first start (its queue wait) may lie
    before ``since`` (a run before a requeue). The spool's retention bounds the read."""
    index = JobIndex()
    for row in spool.read(topic=Topics(topic_prefix).jobs):
        index.add_stored(decode(row.value))
    return index.report(by=by, since=since, until=until)


def _values(r: QueueRow) -> dict[str, Any]:
    return asdict(r)


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
        return span(v)
    return f"{v:.1f}" if isinstance(v, float) else str(v)


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
