"""Memory per tracked GPU series and per task-class baseline (tracemalloc).

Usage: .venv/bin/python bench/memory_footprint.py [NODES] [HOURS]   (default 8 nodes × 8 GPUs, 6 h)

The engine runs the ``mixed`` simulation untraced; its per-node and per-class
state is then loaded into fresh stages under tracemalloc, so the figure is the
state the engine keeps (windows of ``engine.history``, task and dedup tables,
baselines), not the simulator's. Peer for the GPU series: the naive way of
keeping the same history, every GpuSample object of the last ``engine.history``
per GPU. The last line is JSON (for bench/run_all.py).
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from collections import deque
from collections.abc import Callable

from gpuwarden.contract import GpuSample, NodeSnapshot
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import ClassStage, Engine, NodeStage

START = 1_767_225_600.0


def traced(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes still allocated by ``build()`` once it returns (its result kept alive)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    obj = build()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return after - before, obj


def main(nodes: int, hours: float) -> dict[str, float]:
    sim = Simulator("mixed", nodes=nodes, gpus=8, seed=1, start_ts=START, tick_s=15.0)
    engine = Engine()
    keep = int(engine.config.history // sim.tick_s)
    naive: dict[tuple[str, int], deque] = {}
    while sim.ts < START + hours * 3600:
        for r in sim.step():
            engine.process(r)
            if isinstance(r, NodeSnapshot):
                for g in r.gpus.rows():
                    naive.setdefault((r.node, g.index), deque(maxlen=keep)).append(g)
    node_dumps = {n: engine.nodes.dump(n) for n in engine.nodes.nodes()}
    class_dumps = {c: engine.classes.dump(c) for c in engine.classes.classes()}
    gpus = nodes * 8

    def load_nodes() -> NodeStage:
        st = NodeStage(engine.rules, engine.config)
        for n, d in node_dumps.items():
            st.load(n, d)
        return st

    def load_classes() -> ClassStage:
        st = ClassStage(engine.rules, engine.config)
        for c, d in class_dumps.items():
            st.load(c, d)
        return st

    node_bytes, _ = traced(load_nodes)
    class_bytes, _ = traced(load_classes)
    fresh = {k: [g.model_dump_json() for g in v] for k, v in naive.items()}  # new objects, as if just received
    naive_bytes, _ = traced(lambda: {k: deque((GpuSample.model_validate_json(j) for j in v), maxlen=keep)
                                     for k, v in fresh.items()})
    out = {"gpus": gpus, "hours": hours, "history_s": engine.config.history,
           "per_gpu_kib": node_bytes / gpus / 1024, "naive_per_gpu_kib": naive_bytes / gpus / 1024,
           "classes": len(class_dumps), "per_class_kib": class_bytes / max(1, len(class_dumps)) / 1024}
    out["ratio_gpu"] = out["per_gpu_kib"] / out["naive_per_gpu_kib"]
    print(f"{gpus} GPUs on {nodes} nodes, {hours:g} h of the mixed simulation at 15 s ticks")
    print(f"  per tracked GPU series (node stage state / GPUs)   {out['per_gpu_kib']:8.1f} KiB")
    print(f"  naive: last {engine.config.history / 3600:g} h of GpuSample objects per GPU   "
          f"{out['naive_per_gpu_kib']:8.1f} KiB   (ratio {out['ratio_gpu']:.3f})")
    print(f"  per task-class baseline ({out['classes']} classes)             {out['per_class_kib']:8.1f} KiB")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 8, float(sys.argv[2]) if len(sys.argv) > 2 else 6.0)
