"""A stream worker's memory after catching up on a backlog, against the engine's own.

A 2-hour backlog of ``--nodes`` × 8 GPUs (seeded ``mixed``, 1 s ticks, task metrics included)
is loaded compressed as the agents send it, then one ``gpuwarden streams`` worker reads it
from scratch. Figures: the worker's peak RSS (``VmHWM``) and its RSS once caught up (the last
task summary the in-process engine gives is on ``task.summaries``, plus 5 s), the size of
the node state it snapshots at a clean stop (the changelog), and, as the peer, the same records through
the in-process Engine in a fresh subprocess, fed one record at a time: its RSS once done
(what the engine itself needs). The last line is JSON (for bench/run_all.py).

    .venv/bin/python bench/worker_memory.py [--nodes 8] [--hours 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from streams_throughput import PARTITIONS, backlog_worker, broker, cpu_s, output_times, started, stop  # noqa: E402


def status_kib(pid: int | str, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def simulate(nodes: int, hours: float) -> Iterator[Any]:
    """The seeded records, one at a time (the peer never holds the whole input)."""
    from gpuwarden.producers.simulator import Simulator

    start = float(int(time.time() - hours * 3600) // 3600 * 3600 - 3600)
    return Simulator("mixed", nodes=nodes, gpus=8, seed=1, start_ts=start, tick_s=1.0).run(hours * 3600)


ENGINE_ALONE = """
import json, sys
sys.path[:0] = [{repo!r}, {bench!r}]
from worker_memory import simulate, status_kib
from gpuwarden.streams.engine import Engine
engine = Engine()
engine.process_many(simulate({nodes}, {hours}))
state = sum(len(engine.nodes.dump(n)) for n in engine.nodes.nodes())
print(json.dumps({{"rss_kib": status_kib("self", "VmRSS"), "hwm_kib": status_kib("self", "VmHWM"),
                   "state_bytes": state}}))
"""


def engine_alone(nodes: int, hours: float) -> dict[str, int]:
    code = ENGINE_ALONE.format(repo=str(REPO), bench=str(REPO / "bench"), nodes=nodes, hours=hours)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=1800, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


async def worker_run(bootstrap: str, records: list[Any], tmp: Path) -> dict[str, float]:
    from gpuwarden.streams.statewire import app_id
    from tests.streams_kafka.workers import read_to_end

    async with backlog_worker(bootstrap, records, tmp) as w:
        t0, c0 = await started(w.proc, w.log, "first fetch")
        times = await output_times(bootstrap, w.topics.summaries, lambda v: len(v) >= w.summaries, 1800)
        cpu = cpu_s(w.proc.pid) - c0  # read once the last summary was read
        await asyncio.sleep(5.0)
        rss, hwm = status_kib(w.proc.pid, "VmRSS"), status_kib(w.proc.pid, "VmHWM")
        stop(w.proc)  # a clean stop snapshots every node's state into the changelog
        changelog = await read_to_end(bootstrap, f"{app_id(w.settings)}-node-state-changelog", PARTITIONS)
        latest = {r.key: len(r.value or b"") for r in changelog if not r.key.startswith(b"\x00")}
        return {"catch_up_s": times[-1] - t0, "cpu_s": cpu, "rss_kib": rss, "hwm_kib": hwm, "state_bytes": sum(latest.values()),
                "nodes": len(latest)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
    a = ap.parse_args()
    bootstrap, started_here = broker()
    records = list(simulate(a.nodes, a.hours))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            w = asyncio.run(worker_run(bootstrap, records, Path(tmp)))
    finally:
        if started_here:
            subprocess.run([str(REPO / "scripts" / "kafka-local"), "stop"], timeout=120)
    alone = engine_alone(a.nodes, a.hours)
    mib = 1024.0
    from gpuwarden.contract import NodeSnapshot

    gpu_samples = sum(len(r.gpus) for r in records if type(r) is NodeSnapshot)
    print(f"worker memory: {a.hours:g} h backlog, {a.nodes} nodes x 8 GPUs, {len(records):,} records, "
          f"{PARTITIONS} partitions, one worker from scratch (caught up in {w['catch_up_s']:.1f} s, "
          f"worker CPU {w['cpu_s']:.1f} s: {gpu_samples / w['cpu_s']:,.0f} GPU-samples per CPU-s)")
    print(f"  worker, once caught up:  RSS {w['rss_kib'] / mib:7.1f} MiB   peak {w['hwm_kib'] / mib:7.1f} MiB   "
          f"snapshotted node state {w['state_bytes'] / 1e3:.0f} kB ({w['state_bytes'] / max(1, w['nodes']) / 1e3:.0f} kB/node)")
    print(f"  engine alone, same input: RSS {alone['rss_kib'] / mib:7.1f} MiB   peak {alone['hwm_kib'] / mib:7.1f} MiB   "
          f"node state {alone['state_bytes'] / 1e3:.0f} kB")
    print(json.dumps({"records": len(records), "worker_rss_mib": round(w["rss_kib"] / mib, 1),
                      "worker_peak_mib": round(w["hwm_kib"] / mib, 1), "state_kb": round(w["state_bytes"] / 1e3),
                      "engine_rss_mib": round(alone["rss_kib"] / mib, 1),
                      "engine_peak_mib": round(alone["hwm_kib"] / mib, 1), "catch_up_s": round(w["catch_up_s"], 1), "worker_cpu_s": round(w["cpu_s"], 1)}))


if __name__ == "__main__":
    main()
