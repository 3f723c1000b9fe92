"""Slurm's JSON output, read once for every command that prints it (``squeue``, ``sinfo``, ``sacct``).

The scheduler collector (producers) and the job-log importer (history) both read it, so the
vocabulary lives here, below both: numbers in Slurm 22.05's plain form and in the 23.02+ form
``{"set": bool, "infinite": bool, "number": n}``, the job states in the contract's words, GRES
strings, compressed host lists and exit codes.
"""

from __future__ import annotations

import re
from typing import Any

from gpuwarden.contract import JobState

#: Slurm's job states in one vocabulary (``squeue`` long names; REQUEUED jobs wait again).
STATES = {
    "PENDING": JobState.PENDING, "REQUEUED": JobState.PENDING, "REQUEUE_HOLD": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING, "CONFIGURING": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING,
    "SUSPENDED": JobState.SUSPENDED, "STOPPED": JobState.SUSPENDED,
    "COMPLETED": JobState.COMPLETED, "FAILED": JobState.FAILED, "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.TIMEOUT, "TIMEOUT": JobState.TIMEOUT, "CANCELLED": JobState.CANCELLED,
    "REVOKED": JobState.CANCELLED, "SPECIAL_EXIT": JobState.FAILED,
    "PREEMPTED": JobState.PREEMPTED, "NODE_FAIL": JobState.NODE_FAIL, "OUT_OF_MEMORY": JobState.OUT_OF_MEMORY,
}
#: The words of a job put back in the queue (its attempt ended, the job waits again).
REQUEUE_WORDS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
ENDED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
                   JobState.PREEMPTED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY})

_GRES = re.compile(r"gpu(?::(?P<type>[^:(,]+))?:(?P<count>\d+)(?:\(IDX:(?P<idx>[^)]*)\))?")


def number(v: Any) -> int | None:
    """Slurm's numbers: plain, or ``{"set": bool, "infinite": bool, "number": n}`` (newer releases)."""
    if isinstance(v, dict):
        return int(v["number"]) if v.get("set", True) and not v.get("infinite") and "number" in v else None
    return None if v is None else int(v)


def epoch(v: Any) -> float | None:
    """A time in epoch seconds (UTC by definition); 0 and null mean "not set"."""
    n = number(v)
    return float(n) if n else None


def state_word(v: Any) -> str:
    """The state's word: ``"RUNNING"`` (22.05), or the first of ``["RUNNING", flags...]`` (23.02+);
    a word with a suffix (``"CANCELLED by 0"``) gives its first part."""
    v = v[0] if isinstance(v, list) and v else v
    return str(v or "").split(" ")[0].upper()


def exit_code(v: Any) -> int | None:
    """22.05's squeue gives the number; sacct and later releases ``{"status": ..., "return_code": n}``
    with ``return_code`` plain or nested (null when a signal ended it)."""
    if isinstance(v, dict) and "return_code" in v:
        return number(v["return_code"])
    return number(v)


def parse_gres(text: str) -> tuple[int, str, list[int]]:
    """``gpu:h200:2(IDX:0-1)``, ``gres:gpu:4``, ``gpu:2`` → (count, type, indices). Several GRES may
    be listed with commas; the GPU one counts."""
    for part in re.split(r",(?![^(]*\))", text or ""):
        m = _GRES.search(part.removeprefix("gres:"))
        if m:
            return int(m["count"]), m["type"] or "", _indices(m["idx"] or "")
    return 0, "", []


def _indices(text: str) -> list[int]:
    """``0-1,3`` → [0, 1, 3]; ``N/A`` → []."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        if a.isdigit():
            out.extend(range(int(a), int(b) + 1) if b.isdigit() else [int(a)])
    return out


def expand_hostlist(text: str) -> list[str]:
    """Slurm's compressed host lists: ``gn[1-3,5],login1`` → gn1, gn2, gn3, gn5, login1
    (zero padding kept: ``n[01-02]`` → n01, n02)."""
    out: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text or ""):
        m = re.fullmatch(r"(?P<pre>[^\[]*)\[(?P<ranges>[^\]]*)\](?P<post>.*)", item)
        if not m:
            out.append(item)
            continue
        for r in m["ranges"].split(","):
            a, _, b = r.partition("-")
            for n in range(int(a), int(b or a) + 1):
                out.append(f"{m['pre']}{n:0{len(a)}d}{m['post']}")
    return out
