"""A scheduler's past job log as ``scheduler_job/1`` records, so a site starts with its real queue.

``gpuwarden import-jobs --format sacct FILE`` reads Slurm's ``sacct --json`` (:mod:`.sacct`).
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
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import ValidationError

from gpuwarden.config import CommonSettings
from gpuwarden.contract import JobState, SchedulerJob, Topics, encode
from gpuwarden.history.portable import warn_eviction
from gpuwarden.history.sacct import SacctError, invalid_record, read_file
from gpuwarden.spool import Spool

FORMATS = ("philly", "sacct")


class JobLogError(ValueError):
    """A job log line that cannot be read: says the file, the line, the job, the field and why."""


_TIME = "a time such as 2017-10-03 05:55:19 (or None)"


def _time(text: Any, tz: tzinfo) -> float | None:
    if not text or text == "None":
        return None
    t = datetime.fromisoformat(text)
    return (t if t.tzinfo else t.replace(tzinfo=tz)).timestamp()


def _gpus(v: Any) -> int:
    if isinstance(v, bool) or int(v) != v or v < 0:
        raise ValueError(v)
    return int(v)


@dataclass(frozen=True)
class _Line:
    """One Philly job line: its fields read so that an error names the line, the job and the field."""

    where: str
    job: dict[str, Any]

    def get(self, obj: dict[str, Any], key: str, path: str, conv: Callable[[Any], Any], expected: str,
            *, required: bool = True) -> Any:
        if key not in obj and required:
            raise JobLogError(f"{self.where}: {path}: missing; expected {expected}")
        if key not in obj:
            return conv(None)
        try:
            return conv(obj[key])
        except (TypeError, ValueError):
            raise JobLogError(f"{self.where}: {path}: expected {expected}, got {obj[key]!r:.100}") from None


def philly(lines: Iterable[str], *, cluster: str, tz: tzinfo, source: str = "<input>") -> Iterator[SchedulerJob]:
    """The Philly trace's jobs, one record per attempt (a job never started: one pending record
    at its submission)."""
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            job = json.loads(text)
        except ValueError as e:
            raise JobLogError(f"{source}:{n}: not JSON ({e}): expected one Philly job object per line") from None
        if not isinstance(job, dict):
            raise JobLogError(f"{source}:{n}: expected one Philly job object per line, got {job!r:.100}")
        line = _Line(f"{source}:{n}" + (f" (job {job['id']!s:.64})" if "id" in job else ""), job)
        submit = line.get(job, "submitted_time", "submitted_time", lambda v: _time(v, tz), _TIME)
        base = {"cluster": cluster, "scheduler": "slurm", "job_id": line.get(job, "id", "id", str, "the job's id"),
                "gpus": line.get(job, "num_gpus", "num_gpus", _gpus, "a GPU count (0 or more)"), "submit_time": submit}
        attempts = job.get("attempts") or []
        if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
            raise JobLogError(f"{line.where}: attempts: expected a list of {{start_time, end_time}}, "
                              f"got {attempts!r:.100}")
        if not attempts:
            try:
                yield SchedulerJob(ts=submit, state=JobState.PENDING, **base)
            except ValidationError as e:
                raise JobLogError(invalid_record(line.where, e)) from None
            continue
        for i, a in enumerate(attempts):
            start, end = (line.get(a, key, f"attempts[{i}].{key}", lambda v: _time(v, tz), _TIME, required=False)
                          for key in ("start_time", "end_time"))
            try:
                yield SchedulerJob(ts=end or start or submit, state=JobState.UNKNOWN, start_time=start, end_time=end,
                                   restarts=i, reason="retried" if i < len(attempts) - 1 else "", **base)
            except ValidationError as e:
                raise JobLogError(invalid_record(line.where, e)) from None


def read(path: Path, fmt: str, *, cluster: str | None, tz: tzinfo) -> list[SchedulerJob]:
    """Every record of the log, all read before any is written (a bad line imports nothing).
    ``cluster`` None: sacct's own cluster name per job, ``default`` for Philly."""
    if fmt == "sacct":
        return read_file(path, cluster=cluster)
    if fmt != "philly":
        raise JobLogError(f"--format {fmt!r}: this version reads {', '.join(FORMATS)}")
    with open(path, encoding="utf-8") as f:
        return list(philly(f, cluster=cluster or "default", tz=tz, source=str(path)))


def cmd_import_jobs(args: argparse.Namespace, settings: CommonSettings) -> int:
    """``gpuwarden import-jobs --format philly|sacct FILE``: the records into the spool."""
    try:
        tz = ZoneInfo(args.timezone) if args.timezone else timezone.utc
    except (ZoneInfoNotFoundError, ValueError):
        print(f"gpuwarden import-jobs: --timezone {args.timezone!r}: not a time zone (e.g. UTC, America/Los_Angeles)",
              file=sys.stderr)
        return 2
    if args.format == "sacct" and args.timezone:
        print("gpuwarden import-jobs: --timezone does not apply to sacct JSON (its times are epoch seconds, UTC)",
              file=sys.stderr)
    topic = Topics(settings.kafka.topic_prefix).jobs
    try:
        records = read(Path(args.file), args.format, cluster=args.cluster, tz=tz)
    except (JobLogError, SacctError, OSError) as e:
        print(f"gpuwarden import-jobs: {e}", file=sys.stderr)
        return 1
    with Spool(settings.spool.path) as spool:
        spool.append_many(((topic, r.cluster, r.ts, encode(r)) for r in records), published=True)
    jobs = len({r.job_id for r in records})
    print(f"imported {jobs} jobs ({len(records)} records) into spool {settings.spool.path}", file=sys.stderr)
    warn_eviction(min((r.ts for r in records), default=None), settings.spool.max_age)
    return 0
