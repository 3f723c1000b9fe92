"""A scheduler's past job log as ``scheduler_job/1`` records, so a site starts with its real queue.

``gpuwarden import-jobs --format philly FILE`` reads the Philly trace's job form (one JSON object a
line: ``id``, ``num_gpus``, ``submitted_time``, ``attempts`` with ``start_time``/``end_time``; see
../shared/data/README.md). Each attempt becomes one record, its ``restarts`` the attempt's index,
its ``ts`` the attempt's end, so the live collector's records (one per poll, the current attempt's
``restarts``) and imported ones are read the same way by ``report scheduler``. Times without a
zone are read in ``--timezone`` (UTC by default). The trace says nothing of how an attempt ended,
so the state is ``unknown``, with reason ``retried`` for every attempt but the last.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from gpuwarden.config import CommonSettings
from gpuwarden.contract import JobState, SchedulerJob, Topics, encode
from gpuwarden.history.portable import warn_eviction
from gpuwarden.spool import Spool

FORMATS = ("philly",)


class JobLogError(ValueError):
    """A job log line that cannot be read: says the file, the line and why."""


def _time(text: str | None, tz: tzinfo) -> float | None:
    if not text or text == "None":
        return None
    t = datetime.fromisoformat(text)
    return (t if t.tzinfo else t.replace(tzinfo=tz)).timestamp()


def philly(lines: Iterable[str], *, cluster: str, tz: tzinfo, source: str = "<input>") -> Iterator[SchedulerJob]:
    """The Philly trace's jobs, one record per attempt (a job never started: one pending record
    at its submission)."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            job: dict[str, Any] = json.loads(line)
            submit = _time(job["submitted_time"], tz)
            attempts = job.get("attempts") or []
            base = {"cluster": cluster, "scheduler": "slurm", "job_id": str(job["id"]), "gpus": int(job["num_gpus"]),
                    "submit_time": submit}
            if not attempts:
                yield SchedulerJob(ts=submit, state=JobState.PENDING, **base)
                continue
            for i, a in enumerate(attempts):
                start, end = _time(a.get("start_time"), tz), _time(a.get("end_time"), tz)
                yield SchedulerJob(ts=end or start or submit, state=JobState.UNKNOWN, start_time=start, end_time=end,
                                   restarts=i, reason="retried" if i < len(attempts) - 1 else "", **base)
        except (KeyError, TypeError, ValueError) as e:
            raise JobLogError(f"{source}:{n}: {type(e).__name__}: {e}") from None


def read(path: Path, fmt: str, *, cluster: str, tz: tzinfo) -> Iterator[SchedulerJob]:
    if fmt != "philly":
        raise JobLogError(f"--format {fmt!r}: this version reads {', '.join(FORMATS)}")
    with open(path, encoding="utf-8") as f:
        yield from philly(f, cluster=cluster, tz=tz, source=str(path))


def cmd_import_jobs(args: argparse.Namespace, settings: CommonSettings) -> int:
    """``gpuwarden import-jobs --format philly FILE``: the records into the spool."""
    try:
        tz = ZoneInfo(args.timezone) if args.timezone else timezone.utc
    except (ZoneInfoNotFoundError, ValueError):
        print(f"gpuwarden import-jobs: --timezone {args.timezone!r}: not a time zone (e.g. UTC, America/Los_Angeles)",
              file=sys.stderr)
        return 2
    topic = Topics(settings.kafka.topic_prefix).jobs
    try:
        records = list(read(Path(args.file), args.format, cluster=args.cluster, tz=tz))
    except (JobLogError, OSError) as e:
        print(f"gpuwarden import-jobs: {e}", file=sys.stderr)
        return 1
    with Spool(settings.spool.path) as spool:
        spool.append_many((topic, r.cluster, r.ts, encode(r)) for r in records)
    jobs = len({r.job_id for r in records})
    print(f"imported {jobs} jobs ({len(records)} records) into spool {settings.spool.path}", file=sys.stderr)
    warn_eviction(min((r.ts for r in records), default=None), settings.spool.max_age)
    return 0
