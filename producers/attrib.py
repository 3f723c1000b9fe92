"""Who owns a GPU process: user, container, Kubernetes pod, Slurm job, task label.

Everything comes from ``/proc/<pid>`` (status, cgroup, environ, cmdline, stat)
under a configurable root, so tests run on fixture trees. NVML reports host
PIDs, so the agent needs the host's /proc (``--pid=host`` in a container).
Unreadable entries (another user's environ without root, a process that just
exited) give ``None`` fields, never an exception.
"""

from __future__ import annotations

import os
import pwd
import re
from dataclasses import dataclass
from pathlib import Path

_CONTAINER = (
    re.compile(r"(?:docker|cri-containerd|crio|containerd|libpod)-([0-9a-f]{64})\.scope"),
    re.compile(r"/(?:docker|crio|containerd)/([0-9a-f]{64})(?:/|$)"),
    re.compile(r"/kubepods[^\n]*/pod[0-9a-f_-]+/([0-9a-f]{64})(?:/|$)"),
)
_POD = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_SLURM = re.compile(r"/job_(\d+)(?:/|$)")
_POD_SUFFIX = re.compile(r"-[a-z0-9]{5}$")
_RS_HASH = re.compile(r"-[a-f0-9]{6,10}$")
_STS_ORDINAL = re.compile(r"-\d+$")
_PYTHONS = re.compile(r"^(python[\d.]*|torchrun|deepspeed|accelerate|uv|conda)$")


@dataclass(frozen=True, slots=True)
class Attribution:
    uid: int | None = None
    user: str | None = None
    container_id: str | None = None
    pod_uid: str | None = None
    pod_name: str | None = None
    pod_namespace: str | None = None
    slurm_job_id: str | None = None
    task: str | None = None
    task_id: str | None = None
    project: str | None = None
    command: str | None = None


def parse_cgroup(text: str) -> tuple[str | None, str | None, str | None]:
    """(container id, pod UID, Slurm job id) from ``/proc/PID/cgroup`` (v1 or v2, any driver)."""
    container = pod = job = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if container is None:
            for rx in _CONTAINER:
                if m := rx.search(path):
                    container = m.group(1)
                    break
        if pod is None and (m := _POD.search(path)):
            pod = m.group(1).replace("_", "-")
        if job is None and "slurm" in path and (m := _SLURM.search(path)):
            job = m.group(1)
    return container, pod, job


def pod_owner(pod_name: str) -> str:
    """``vllm-serve-7d9f8c6b5-x2k4p`` → ``vllm-serve``; ``db-0`` → ``db`` (Deployment/StatefulSet)."""
    name = _POD_SUFFIX.sub("", pod_name)
    if name != pod_name:
        return _RS_HASH.sub("", name)
    return _STS_ORDINAL.sub("", pod_name)


def command_label(argv: list[str]) -> str | None:
    """The command's basename; for interpreters and launchers, the script they run."""
    if not argv:
        return None
    base = os.path.basename(argv[0])
    if _PYTHONS.match(base):
        for arg in argv[1:]:
            if not arg.startswith("-"):
                return os.path.basename(arg)
    return base


class Attributor:
    """Attributes PIDs, caching per (pid, start time) so PID reuse is noticed."""

    def __init__(self, proc_root: str | os.PathLike[str] = "/proc") -> None:
        self.root = Path(proc_root)
        self._cache: dict[int, tuple[str | None, Attribution]] = {}

    def __call__(self, pid: int) -> Attribution:
        start = self._read(pid, "stat")
        start_key = start.rsplit(")", 1)[-1].split()[19] if start and ")" in start else None
        hit = self._cache.get(pid)
        if hit is not None and hit[0] == start_key and start_key is not None:
            return hit[1]
        attr = self._attribute(pid)
        self._cache[pid] = (start_key, attr)
        return attr

    def forget_except(self, live: set[int]) -> None:
        """Drop cache entries of processes no longer on any GPU."""
        for pid in [p for p in self._cache if p not in live]:
            del self._cache[pid]

    def _read(self, pid: int, name: str) -> str | None:
        try:
            return (self.root / str(pid) / name).read_bytes().decode("utf-8", "replace")
        except OSError:
            return None

    def _attribute(self, pid: int) -> Attribution:
        uid = user = None
        status = self._read(pid, "status")
        if status:
            for line in status.splitlines():
                if line.startswith("Uid:"):
                    uid = int(line.split()[1])
                    break
        if uid is not None:
            try:
                user = pwd.getpwuid(uid).pw_name
            except KeyError:
                user = None
        container, pod_uid, job = parse_cgroup(self._read(pid, "cgroup") or "")
        env_text = self._read(pid, "environ")
        env = dict(kv.split("=", 1) for kv in (env_text or "").split("\0") if "=" in kv)
        job = job or env.get("SLURM_JOB_ID")
        pod_name = env.get("POD_NAME") or (env.get("HOSTNAME") if pod_uid else None)
        namespace = env.get("POD_NAMESPACE")
        argv = [a for a in (self._read(pid, "cmdline") or "").split("\0") if a]
        task = (env.get("GPUWARDEN_TASK") or env.get("SLURM_JOB_NAME")
                or (pod_owner(pod_name) if pod_name else None) or command_label(argv))
        task_id = (env.get("GPUWARDEN_TASK_ID") or (f"slurm-{job}" if job else None)
                   or pod_name or (f"pid-{pid}" if argv or status else None))
        return Attribution(
            uid=uid, user=user, container_id=container, pod_uid=pod_uid, pod_name=pod_name,
            pod_namespace=namespace, slurm_job_id=job, task=task, task_id=task_id,
            project=env.get("GPUWARDEN_PROJECT") or env.get("SLURM_JOB_ACCOUNT"),
            command=" ".join(argv)[:4096] or None,
        )
