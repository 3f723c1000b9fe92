"""``sacct --json`` (Slurm's accounting database) as ``scheduler_job/1`` records, one per attempt.

Read as Slurm 22.05.8 prints it (OpenAPI ``dbv0.0.38``; checked on a real slurmdbd, see
tests/fixtures/sacct/README.md) and in the 23.02+ shapes (nested numbers, state lists, nested
``return_code``), both through :mod:`gpuwarden.slurmjson`, which the collector shares:

* **Attempts.** A requeued job has one entry per run, the earlier ones in state ``REQUEUED``.
  sacct's manual says only the most recent run is shown without ``--duplicates``; 22.05.8's
  JSON printed them all either way (checked). Export with it, else a job may count one
  attempt. A job's entries (cluster, job id; array tasks as ``JOB_TASK``, het components as
  ``JOB+N``) are ordered by submission and numbered from 0: the record's ``restarts``.
* **Times** are epoch seconds, UTC by definition: ``--timezone`` does not apply. Slurm resets
  a job's submission time when it requeues it, so every attempt carries the job's first
  submission (the report's queue wait is first start minus first submission) and its own
  eligible time. ``ts`` is the attempt's end; for a running one, start plus elapsed (when
  sacct ran); for one never started, its submission.
* **GPUs** are the ``gres/gpu`` TRES allocated (requested, for a job that never ran); they are
  only there when slurm.conf counts them (``AccountingStorageTRES=gres/gpu``). The type comes
  from a typed entry (``gres/gpu:h200``) when there is one.
* **Started** means nodes were assigned: a job cancelled before it ran has a start time (equal
  to its end) and ``"nodes": "None assigned"``; it counts no attempt.
* **State** in the contract's words; an attempt ended by a requeue is ``unknown`` with reason
  ``requeued`` (the job waited again); a pending job keeps Slurm's reason.
* **Exit code** is ``exit_code.return_code`` for ended attempts, None when a signal ended it.
  Slurm 22.05.8 prints ``0`` there for a batch job that exited 3 (``sacct`` in text says
  ``3:0``): the state (``failed``) is right, the code is what the JSON says.

A malformed entry stops the import with the file, the entry, the job and the field; nothing is
written (the caller writes only a fully read file).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gpuwarden.contract import JobState, SchedulerJob
from gpuwarden.slurmjson import ENDED, REQUEUE_WORDS, STATES, epoch, exit_code, expand_hostlist, number, state_word

_NUMBER = 'a number (or {"set": true, "number": N})'
_EPOCH = 'epoch seconds (a number, or {"set": true, "number": N})'


class SacctError(ValueError):
    """``sacct --json`` output that cannot be read: says the file, the entry, the job and the field."""


def _at(doc: Any, path: str) -> Any:
    """``doc["a"]["b"]`` for ``"a.b"``; None where a level is missing."""
    for key in path.split("."):
        doc = doc.get(key) if isinstance(doc, dict) else None
    return doc


@dataclass(frozen=True)
class _Entry:
    """One entry of ``jobs``, read field by field so an error names the field and what it should be."""

    source: str
    index: int
    job: dict[str, Any]

    @property
    def where(self) -> str:
        jid = self.job.get("job_id")
        return f"{self.source}: jobs[{self.index}]" + (f" (job {jid!s:.64})" if jid is not None else "")

    def fail(self, field: str, expected: str, got: Any) -> SacctError:
        return SacctError(f"{self.where}: {field}: expected {expected}, got {got!r}")

    def int_at(self, field: str) -> int | None:
        v = _at(self.job, field)
        try:
            return number(v)
        except (TypeError, ValueError):
            raise self.fail(field, _NUMBER, v) from None

    def time_at(self, field: str, *, required: bool = False) -> float | None:
        v = _at(self.job, field)
        try:
            t = epoch(v)
        except (TypeError, ValueError):
            raise self.fail(field, _EPOCH, v) from None
        if required and t is None:
            raise self.fail(field, _EPOCH, v)
        return t

    def text_at(self, field: str) -> str:
        v = _at(self.job, field)
        if v is None:
            return ""
        if not isinstance(v, str):
            raise self.fail(field, "a string", v)
        return v

    def job_id(self) -> str:
        jid = self.int_at("job_id")
        if jid is None:
            raise self.fail("job_id", "the job's number", self.job.get("job_id"))
        task, offset = self.int_at("array.task_id"), self.int_at("het.job_offset")
        if task is not None:
            return f"{self.int_at('array.job_id')}_{task}"
        if offset is not None:
            return f"{self.int_at('het.job_id')}+{offset}"
        return str(jid)

    def gpus(self) -> tuple[int, str]:
        """GPUs from the ``gres/gpu`` TRES: allocated, or requested when none were allocated."""
        for side in ("allocated", "requested"):
            field = f"tres.{side}"
            entries = _at(self.job, field)
            if entries is None:
                continue
            if not isinstance(entries, list) or not all(isinstance(t, dict) for t in entries):
                raise self.fail(field, "a list of {type, name, count}", entries)
            if not entries:
                continue
            plain, typed = None, {}
            for i, t in enumerate(entries):
                name = t.get("name") or ""
                if t.get("type") != "gres" or not (name == "gpu" or name.startswith("gpu:")):
                    continue
                try:
                    count = number(t.get("count")) or 0
                except (TypeError, ValueError):
                    raise self.fail(f"{field}[{i}].count", _NUMBER, t.get("count")) from None
                if name == "gpu":
                    plain = count
                else:
                    typed[name.removeprefix("gpu:")] = count
            kind = next(iter(typed)) if len(typed) == 1 else ""
            return (plain if plain is not None else sum(typed.values())), kind
        return 0, ""

    def nodes(self) -> list[str]:
        text = self.text_at("nodes")
        if not text or text == "None assigned":
            return []
        try:
            return expand_hostlist(text)
        except ValueError:
            raise self.fail("nodes", "a Slurm host list such as gn[1-2]", text) from None

    def attempt(self, cluster: str | None) -> dict[str, Any]:
        """The record's fields but ``restarts`` and ``submit_time`` (those need the job's other attempts)."""
        word = state_word(_at(self.job, "state.current"))
        if not word:
            raise self.fail("state.current", "a Slurm job state such as COMPLETED", _at(self.job, "state.current"))
        requeued = word in REQUEUE_WORDS
        state = JobState.UNKNOWN if requeued else STATES.get(word, JobState.UNKNOWN)
        submit = self.time_at("time.submission", required=True)
        start, end = self.time_at("time.start"), self.time_at("time.end")
        nodes = self.nodes()
        if state is JobState.PENDING:
            start = end = None
        if not nodes:  # cancelled before it ran: Slurm sets its start to its end, assigns no node
            start = None
        ended = requeued or state in ENDED
        ts = end if end is not None else start + (self.int_at("time.elapsed") or 0) if start is not None else submit
        reason = self.text_at("state.reason")
        gpus, kind = self.gpus()
        try:
            code = exit_code(self.job.get("exit_code")) if ended else None
        except (TypeError, ValueError):
            raise self.fail("exit_code", '{"status": ..., "return_code": N}', self.job.get("exit_code")) from None
        return {
            "ts": ts, "cluster": cluster or self.text_at("cluster") or "default", "scheduler": "slurm",
            "job_id": self.job_id(), "name": self.text_at("name"), "user": self.text_at("user"),
            "account": self.text_at("account"), "queue": self.text_at("partition"), "state": state,
            "reason": "requeued" if requeued else reason if state is JobState.PENDING and reason != "None" else "",
            "eligible_time": self.time_at("time.eligible"), "start_time": start,
            "end_time": end if ended else None, "gpus": gpus, "gpu_type": kind,
            "nodes": nodes if start is not None else [], "exit_code": code, "submission": submit,
        }


def records(doc: Any, *, cluster: str | None, source: str = "<input>") -> list[SchedulerJob]:
    """Every attempt of every job in one ``sacct --json`` document, in job and attempt order."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SacctError(f"{source}: no list under 'jobs': expected the output of `sacct --json`")
    if doc.get("errors"):
        raise SacctError(f"{source}: sacct reported errors, so its job list may be incomplete: {doc['errors']!r:.300}")
    jobs: dict[tuple[str, str], list[tuple[_Entry, dict[str, Any]]]] = {}
    for i, job in enumerate(doc["jobs"]):
        if not isinstance(job, dict):
            raise SacctError(f"{source}: jobs[{i}]: expected an object (one job), got {job!r:.100}")
        entry = _Entry(source, i, job)
        fields = entry.attempt(cluster)
        jobs.setdefault((fields["cluster"], fields["job_id"]), []).append((entry, fields))
    return list(_numbered(jobs))


def _numbered(jobs: dict[tuple[str, str], list[tuple[_Entry, dict[str, Any]]]]) -> Iterator[SchedulerJob]:
    for attempts in jobs.values():
        attempts.sort(key=lambda a: (a[1]["submission"], a[1]["start_time"] or math.inf))
        first = attempts[0][1]["submission"]
        for n, (entry, fields) in enumerate(attempts):
            fields = {k: v for k, v in fields.items() if k != "submission"}
            try:
                yield SchedulerJob(**fields, submit_time=first, restarts=n)
            except ValidationError as e:
                raise SacctError(invalid_record(entry.where, e)) from None


def invalid_record(where: str, e: ValidationError) -> str:
    """A job record the contract refuses (a name too long, ...), said as ``where: field: why (got ...)``."""
    err = e.errors()[0]
    return f"{where}: {'.'.join(map(str, err['loc']))}: {err['msg']} (got {err.get('input')!r:.100})"


def read_file(path: Path, *, cluster: str | None) -> list[SchedulerJob]:
    """The records of a ``sacct --json`` file, all read before any is returned."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise SacctError(f"{path}: not UTF-8 text at byte {e.start}: expected the output of `sacct --json`") from None
    except json.JSONDecodeError as e:
        raise SacctError(f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg}): "
                         "expected the output of `sacct --json`") from None
    return records(doc, cluster=cluster, source=str(path))
