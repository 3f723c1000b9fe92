"""Slurm's queue and nodes as contract records, from ``squeue --json`` and ``sinfo --json``.

Read from the commands' JSON (Slurm 22.05's OpenAPI v0.0.38 data; later releases nest some
numbers as ``{"set": true, "number": N}``: both are read by :mod:`gpuwarden.slurmjson`, which
the job-log importer shares). The parsing is pure so it is tested on recorded output;
:class:`SlurmCli` runs the commands, and the poll loop around it is
:mod:`gpuwarden.producers.scheduler`.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from typing import Any

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob
from gpuwarden.slurmjson import ENDED, STATES, epoch, exit_code, expand_hostlist, number, parse_gres, state_word


class SlurmError(Exception):
    """A Slurm command failed, timed out or printed what is not its JSON."""


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
        state = STATES.get(state_word(j.get("job_state")), JobState.UNKNOWN)
        nodes = expand_hostlist(j.get("nodes") or "") if state is not JobState.PENDING else []
        gpus, kind = _gpus_requested(j, number(j.get("node_count")) or len(nodes))
        indices = {}
        for node, detail in zip(nodes, j.get("gres_detail") or []):
            _, dkind, idx = parse_gres(detail)
            kind = kind or dkind
            if idx:
                indices[node] = idx
        task = number(j.get("array_task_id"))
        job_id = f"{number(j.get('array_job_id'))}_{task}" if task is not None else str(number(j["job_id"]))
        reason = j.get("state_reason") or ""
        out.append(SchedulerJob(
            ts=ts, cluster=cluster, scheduler="slurm", job_id=job_id, name=j.get("name") or "",
            user=j.get("user_name") or "", account=j.get("account") or "", queue=j.get("partition") or "",
            state=state, reason="" if reason == "None" else reason,
            submit_time=epoch(j.get("submit_time")), eligible_time=epoch(j.get("eligible_time")),
            start_time=epoch(j.get("start_time")) if state is not JobState.PENDING else None,
            end_time=epoch(j.get("end_time")) if state in ENDED else None,
            gpus=gpus, gpu_type=kind, nodes=nodes, gpu_indices=indices,
            restarts=number(j.get("restart_cnt")) or 0,
            exit_code=exit_code(j.get("exit_code")) if state in ENDED else None,
        ))
    return out


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

