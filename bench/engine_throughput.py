"""Engine alone: GPU-samples per second per core (one process, one core).

A GPU-sample is one GpuSample processed; records are NodeSnapshots of 8 GPUs
with their events and task metrics, from the seeded simulator, built before the
clock starts (decoding is the transport's cost, not the engine's).

    .venv/bin/python bench/engine_throughput.py [--nodes 4] [--minutes 60] [--scenario mixed]

``measure(records)`` is what bench/streams_throughput* calls for the side-by-side run.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from gpuwarden.contract import NodeSnapshot
from gpuwarden.streams.engine import Engine


def measure(records: list[Any], engine: Engine | None = None) -> dict[str, float]:
    """Feed ``records`` through a fresh engine; figures for the report (CPU time of this process)."""
    engine = engine or Engine()
    gpu_samples = sum(len(r.gpus) for r in records if isinstance(r, NodeSnapshot))
    t0, c0 = time.perf_counter(), time.process_time()
    transitions = len(engine.process_many(records)) + len(engine.flush())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"records": len(records), "gpu_samples": gpu_samples, "transitions": transitions,
            "wall_s": wall, "cpu_s": cpu, "gpu_samples_per_s": gpu_samples / cpu if cpu else 0.0,
            "records_per_s": len(records) / cpu if cpu else 0.0}


def simulate(scenario: str, nodes: int, minutes: float, tick_s: float = 1.0) -> list[Any]:
    """Seeded records from yesterday 00:00 UTC: live workers (bench/streams_throughput.py)
    dead-letter records older than ``limits.max_past_skew`` (7 days)."""
    import time

    from gpuwarden.producers.simulator import Simulator

    start = float(int(time.time()) // 86400 * 86400 - 86400)
    sim = Simulator(scenario, nodes=nodes, gpus=8, seed=1, start_ts=start, tick_s=tick_s)
    return list(sim.run(minutes * 60))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--scenario", default="mixed")
    a = ap.parse_args()
    records = simulate(a.scenario, a.nodes, a.minutes)
    m = measure(records)
    target = 100_000
    print(f"engine alone, {a.scenario}, {a.nodes} nodes x 8 GPUs, {a.minutes:g} min at 1 s ticks")
    print(f"  records            {m['records']:>12,}")
    print(f"  GPU-samples        {m['gpu_samples']:>12,}")
    print(f"  transitions        {m['transitions']:>12,}")
    print(f"  CPU seconds        {m['cpu_s']:>12.2f}")
    print(f"  GPU-samples/s/core {m['gpu_samples_per_s']:>12,.0f}   target {target:,}   "
          f"ratio {m['gpu_samples_per_s'] / target:.2f}x")


if __name__ == "__main__":
    main()
