"""Hand-built contract records for the history tests (no simulator: every number is on paper)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpuwarden.contract import GpuProcess, GpuSample, NodeSnapshot, TaskMetric, TaskMetricKind

GIB = 1 << 30
REPO = Path(__file__).resolve().parents[2]


def gpu(index: int, util: float | None, mem_gib: float = 0.0, **kw: object) -> GpuSample:
    return GpuSample(index=index, uuid=f"GPU-{index:04d}", util_gpu=util,
                     mem_used_bytes=int(mem_gib * GIB), mem_total_bytes=80 * GIB, **kw)


def proc(gpu_index: int, user: str, task: str, task_id: str, project: str,
         mem_gib: float = 10.0) -> GpuProcess:
    return GpuProcess(pid=1000 + gpu_index, gpu_index=gpu_index, user=user, task=task,
                      task_id=task_id, project=project, used_memory_bytes=int(mem_gib * GIB))


def snap(node: str, ts: float, seq: int, gpus: list[GpuSample], processes: list[GpuProcess],
         interval_s: float | None = None) -> NodeSnapshot:
    return NodeSnapshot.of(node=node, ts=ts, seq=seq, boot_id="boot-1", agent_version="test",
                        interval_s=interval_s, gpus=gpus, processes=processes)


def metric(node: str, ts: float, task: str, task_id: str, kind: TaskMetricKind,
           **kw: object) -> TaskMetric:
    return TaskMetric(node=node, ts=ts, task=task, task_id=task_id, kind=kind, **kw)


def gw(*argv: str, timeout: float = 900, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real ``gpuwarden`` command line in a subprocess (``env`` on top of ours); ``timeout``
    only catches a hang (#33: a 1 h simulated run takes ~30 s here, more on a busy machine)."""
    return subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})})


def config(tmp: Path, prefix: str = "", extra: str = "", spool: Path | None = None) -> str:
    """A config file in ``tmp`` with its own spool (never the repo's ./var) and topic prefix."""
    tmp.mkdir(parents=True, exist_ok=True)
    cfg = tmp / "gpuwarden.yaml"
    cfg.write_text(f"site: lab-a\nspool:\n  path: {spool or tmp / 'spool' / 'spool.db'}\n"
                   f"kafka:\n  topic_prefix: '{prefix}'\n{extra}")
    return str(cfg)
