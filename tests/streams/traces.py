"""Synthetic traces at the sampling real agents use (1 s), built from per-second functions.

The simulator's faults are its own model; these traces state one behaviour each (a checkpoint
pattern, a leak rate, an allocator warm-up) so a rule's test says what it is judged on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gpuwarden.contract import GpuProcess, GpuSample, NodeSnapshot, TaskMetric, TaskMetricKind

T0 = 1_700_000_000.0
GIB = 1 << 30
H200_GIB = 141.0


def trace(seconds: int, util: Callable[[float], float], mem_gib: Callable[[float], float], *,
          checkpoints: Callable[[float], bool] | None = None, sdk: bool = False, gpus: int = 1,
          node: str = "n1", task_class: str = "llm-pretrain", task_id: str = "job-1",
          total_gib: float = H200_GIB, step_s: float = 1.0, data_wait: Callable[[float], float] | None = None,
          comm: Callable[[float], float] | None = None,
          power_w: Callable[[float], float] | None = None,
          gpm: Callable[[float], tuple[float, float]] | None = None,
          sample_s: int = 1) -> Iterator[NodeSnapshot | TaskMetric]:
    """One task on ``gpus`` GPUs of ``node`` for ``seconds``: snapshots each second, with
    ``util(t)`` % and ``mem_gib(t)`` GiB (``t`` seconds since the start). ``checkpoints(t)``: the
    task is writing a checkpoint at ``t``; with ``sdk`` it says so in checkpoint_begin/end
    records, and step records come each ``step_s`` outside checkpoints, ``data_wait(t)`` (default
    0.02) and ``comm(t)`` (default none) of each step waiting on data and in collectives;
    ``power_w(t)``: the draw (default 500 W); ``gpm(t)``: (SM activity, tensor activity) %, as GPM
    reports them (default none: a GPU without GPM), 0 inside checkpoints. ``sample_s``: one snapshot (and step) per this many
    seconds, for traces days long."""
    in_ckpt = False
    for i in range(0, seconds, sample_s):
        t, ts = float(i), T0 + i
        now_ckpt = bool(checkpoints and checkpoints(t))
        if sdk and now_ckpt != in_ckpt:
            kind = TaskMetricKind.CHECKPOINT_BEGIN if now_ckpt else TaskMetricKind.CHECKPOINT_END
            yield TaskMetric(ts=ts, node=node, task=task_class, task_id=task_id, kind=kind, pid=100)
        in_ckpt = now_ckpt
        u = 0.0 if now_ckpt else util(t)
        sm, tensor = (None, None) if gpm is None else (0.0, 0.0) if now_ckpt else gpm(t)
        samples = [GpuSample(index=g, uuid=f"GPU-{g}", util_gpu=u, mem_used_bytes=int(mem_gib(t) * GIB),
                             sm_active=sm, tensor_active=tensor,
                             mem_total_bytes=int(total_gib * GIB), temp_gpu_c=60.0,
                             power_w=500.0 if power_w is None else power_w(t),
                             power_limit_w=700.0) for g in range(gpus)]
        procs = [GpuProcess(pid=100 + g, gpu_index=g, used_memory_bytes=int(mem_gib(t) * GIB), task=task_class,
                            task_id=task_id, user="alice") for g in range(gpus)]
        yield NodeSnapshot.of(ts=ts, node=node, seq=i, boot_id="b1", agent_version="test", interval_s=float(sample_s),
                              gpus=samples, processes=procs)
        if sdk and not now_ckpt and i % int(step_s) == 0:
            yield TaskMetric(ts=ts + 0.5, node=node, task=task_class, task_id=task_id,
                             kind=TaskMetricKind.STEP, pid=100, step=i, step_time_s=step_s,
                             data_wait_s=(0.02 if data_wait is None else data_wait(t)) * step_s,
                             comm_s=None if comm is None else comm(t) * step_s)
