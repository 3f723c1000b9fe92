"""Slurm's queue and nodes as contract records, from ``squeue --json`` and ``sinfo --json``.

Read from the commands' JSON (Slurm 22.05's OpenAPI v0.0.38 data; later releases nest some
numbers as ``{"set": true, "number": N}``, which :func:`_number` accepts too). The parsing is
pure so it is tested on recorded output; :class:`SlurmCli` runs the commands, and the poll loop
around it is :mod:`gpuwarden.producers.scheduler`.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob

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
ENDED = frozenset({JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT,
                   JobState.PREEMPTED, JobState.NODE_FAIL, JobState.OUT_OF_MEMORY})

_GRES = re.compile(r"gpu(?::(?P<type>[^:(,]+))?:(?P<count>\d+)(?:\(IDX:(?P<idx>[^)]*)\))?")


class SlurmError(Exception):
    """A Slurm command failed, timed out or printed what is not its JSON."""


def _number(v: Any) -> int | None:
    """Slurm's numbers: plain, or ``{"set": bool, "infinite": bool, "number": n}`` (newer releases)."""
    if isinstance(v, dict):
        return int(v["number"]) if v.get("set", True) and not v.get("infinite") and "number" in v else None
    return None if v is None else int(v)


def _time(v: Any) -> float | None:
    n = _number(v)
    return float(n) if n else None  # 0: not set


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


def _gpus_requested(job: dict[str, Any], nodes: int) -> tuple[int, str]:
    """GPUs asked for: per job (``--gpus``), else per node (``--gres``) times the node count."""
    count, kind, _ = parse_gres(job.get("tres_per_job") or "")
    if count:
        return count, kind
    count, kind, _ = parse_gres(job.get("tres_per_node") or "")
    return count * max(nodes, 1), kind


def jobs(doc: dict[str, Any], cluster: str, ts: float) -> list[SchedulerJob]:
    """``squeue --json`` as one SchedulerJob per job (array tasks each their own)."""
    out = []
    for j in doc.get("jobs", []):
        raw = j.get("job_state") or ""
        raw = raw[0] if isinstance(raw, list) and raw else raw  # 23.02+: the state, then its flags
        state = STATES.get(str(raw).split(" ")[0].upper(), JobState.UNKNOWN)
        nodes = expand_hostlist(j.get("nodes") or "") if state is not JobState.PENDING else []
        gpus, kind = _gpus_requested(j, _number(j.get("node_count")) or len(nodes))
        indices = {}
        for node, detail in zip(nodes, j.get("gres_detail") or []):
            _, dkind, idx = parse_gres(detail)
            kind = kind or dkind
            if idx:
                indices[node] = idx
        task = _number(j.get("array_task_id"))
        job_id = f"{_number(j.get('array_job_id'))}_{task}" if task is not None else str(_number(j["job_id"]))
        reason = j.get("state_reason") or ""
        out.append(SchedulerJob(
            ts=ts, cluster=cluster, scheduler="slurm", job_id=job_id, name=j.get("name") or "",
            user=j.get("user_name") or "", account=j.get("account") or "", queue=j.get("partition") or "",
            state=state, reason="" if reason == "None" else reason,
            submit_time=_time(j.get("submit_time")), eligible_time=_time(j.get("eligible_time")),
            start_time=_time(j.get("start_time")) if state is not JobState.PENDING else None,
            end_time=_time(j.get("end_time")) if state in ENDED else None,
            gpus=gpus, gpu_type=kind, nodes=nodes, gpu_indices=indices,
            restarts=_number(j.get("restart_cnt")) or 0,
            exit_code=_exit_code(j.get("exit_code")) if state in ENDED else None,
        ))
    return out


def _exit_code(v: Any) -> int | None:
    """22.05 gives the number; later releases ``{"status": [...], "return_code": {"number": n}}``."""
    if isinstance(v, dict) and "return_code" in v:
        return _number(v["return_code"])
    return _number(v)


def nodes(doc: dict[str, Any], cluster: str, ts: float) -> list[NodeCapacity]:
    """``sinfo --json`` as one NodeCapacity per node (GPUs from its GRES and GRES in use)."""
    out = []
    for n in doc.get("nodes", []):
        total, kind, _ = parse_gres(n.get("gres") or "")
        used, _, idx = parse_gres(n.get("gres_used") or "")
        state = n.get("state")
        state = "+".join(state) if isinstance(state, list) else str(state or "")
        out.append(NodeCapacity(ts=ts, cluster=cluster, scheduler="slurm", node=n["name"],
                                partitions=list(n.get("partitions") or []), state=state.lower(),
                                gpu_type=kind, gpus_total=total, gpus_allocated=len(idx) or used))
    return out


@dataclass
class SlurmCli:
    """Runs ``squeue --json`` and ``sinfo --json`` (``SLURM_CONF`` and PATH as the process has
    them), each within ``timeout_s``."""

    timeout_s: float = 30.0
    env: dict[str, str] | None = None

    async def _json(self, *argv: str) -> dict[str, Any]:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                env={**os.environ, **(self.env or {})})
        except OSError as e:
            raise SlurmError(f"{argv[0]}: {e.strerror or e}") from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout_s)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise SlurmError(f"{' '.join(argv)}: no answer within {self.timeout_s:.0f} s") from None
        if proc.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} exited {proc.returncode}: "
                             f"{err.decode(errors='replace').strip()[-300:]}")
        try:
            doc = json.loads(out)
        except ValueError as e:
            raise SlurmError(f"{' '.join(argv)}: not JSON ({e})") from None
        for e in doc.get("errors") or []:  # e.g. the controller down: exit 0, this and no jobs
            why = e.get("error") or e.get("description") or e if isinstance(e, dict) else e
            errno = f" (errno {e['errno']})" if isinstance(e, dict) and "errno" in e else ""
            raise SlurmError(f"{' '.join(argv)}: {why}{errno}")
        return doc

    async def poll(self, cluster: str, ts: float) -> tuple[list[SchedulerJob], list[NodeCapacity]]:
        queue, info = await asyncio.gather(self._json("squeue", "--all", "--json"), self._json("sinfo", "--json"))
        return jobs(queue, cluster, ts), nodes(info, cluster, ts)

