"""Agent CPU per tick: 8 fake H200s with the measured NVML call latencies, attribution included.

    .venv/bin/python bench/agent_overhead.py [--ticks 300]

Fake NVML calls spin for their measured median (CPU, as the ioctl path costs)
or sleep when ≥1 ms (energy, max clock). One tick = the fast set for every GPU,
process attribution from a fixture /proc tree, counter-delta events and JSON
encoding of the snapshot; the slow set (energy, PCIe replays, field values,
NVLink, MIG, GPM) runs every 15th tick, as with 1 s / 15 s cadences. Peer:
polling with the nvidia-smi subprocess (figures measured on the same H200).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo: tests.fakes is no package data

from gpuwarden.contract import encode  # noqa: E402
from gpuwarden.producers.attrib import Attributor  # noqa: E402
from gpuwarden.producers.nvml import NvmlCollector  # noqa: E402
from tests.fakes.nvml import LATENCY_US_H200, FakeGpu, FakeNvml  # noqa: E402

NVIDIA_SMI_GPU_MS, NVIDIA_SMI_APPS_MS = 27.9, 19.5  # median wall per poll (reference)
INPROC_NVML_CPU_US = 69.0  # same fields + process list, in-process, per poll (reference, 1 GPU)
PROC = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "proc" / "slurm-v1"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--gpus", type=int, default=8)
    a = ap.parse_args()
    gpus = [FakeGpu(i, processes=[(4301, 60 << 30)]) for i in range(a.gpus)]
    nv = FakeNvml(gpus, latency_us=LATENCY_US_H200)
    t = iter(range(10**9))
    c = NvmlCollector(nv, node="bench", slow_in_thread=False, slow_s=15, gpm_interval_s=0.1,
                      attributor=Attributor(PROC), clock=lambda: 1.7e9 + next(t))
    c.step()  # warm: static reads and the first slow set
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(a.ticks):
        for r in c.step():
            encode(r)
    cpu = (time.process_time() - cpu0) / a.ticks
    wall = (time.perf_counter() - wall0) / a.ticks
    per_gpu = cpu / a.gpus
    smi = (NVIDIA_SMI_GPU_MS + NVIDIA_SMI_APPS_MS) / 1000
    print(f"ticks={a.ticks} gpus={a.gpus} (slow set every 15th tick, included)")
    print(f"agent CPU per tick            {cpu * 1e6:9.1f} µs   ({per_gpu * 1e6:.1f} µs per GPU-tick)")
    print(f"agent wall per tick           {wall * 1e6:9.1f} µs   (includes GPM's 100 ms sample gap on slow ticks)")
    print(f"share of one core at 1 s tick {cpu * 100:9.3f} %    (target < 0.5 %)")
    print(f"nvidia-smi polling, per tick  {smi * 1e6:9.1f} µs wall (2 subprocesses; reference)")
    print(f"ratio nvidia-smi / agent      {smi / cpu:9.0f} x")
    print(f"in-process NVML reference     {INPROC_NVML_CPU_US:9.1f} µs CPU per GPU-poll; agent {per_gpu * 1e6:.1f}"
          f" µs per GPU-tick (ratio {per_gpu * 1e6 / INPROC_NVML_CPU_US:.2f})")


if __name__ == "__main__":
    main()
