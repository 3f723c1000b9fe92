"""A stream worker's memory after catching up on a backlog, against the engine's own.

A 2-hour backlog of ``--nodes`` × 8 GPUs (seeded ``mixed``, 1 s ticks, task metrics included)
is loaded compressed as the agents send it, then one ``gpuwarden streams`` worker (or ``--workers``
of one group, started together) reads it from scratch. Figures: the worker's peak RSS (``VmHWM``) and its RSS once caught up (the last
task summary the in-process engine gives is on ``task.summaries``, plus 5 s), the size of
the node state it snapshots at a clean stop (the changelog), and, as the peer, the same records through
the in-process Engine in a fresh subprocess, fed one record at a time: its RSS once done
(what the engine itself needs). The last line is JSON (for bench/run_all.py).

    .venv/bin/python bench/worker_memory.py [--nodes 8] [--hours 2] [--workers 1]
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

from streams_throughput import PARTITIONS, backlog_worker, broker, cpu_s, output_times, started, stop, worker  # noqa: E402


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


async def worker_run(bootstrap: str, records: list[Any], tmp: Path, workers: int = 1) -> dict[str, Any]:
    """One worker, or ``workers`` of one group started together, reading the backlog from scratch:
    the catch-up's wall time (the first worker's first fetch to the last summary) and per worker its
    CPU seconds from its own first fetch, its RSS and peak RSS."""
    from gpuwarden.streams.statewire import app_id
    from tests.streams_kafka.workers import cli_module, read_to_end

    async with backlog_worker(bootstrap, records, tmp) as w:
        extra = [worker([sys.executable, "-m", cli_module(), "-v", "streams", "--config", str(tmp / "gpuwarden.yaml"),
                         "--worker-id", f"bench-{i}", "--data-dir", str(tmp / f"streams-{i}")], tmp / f"streams-{i}.log")
                 for i in range(1, workers)]
        try:
            procs = [(w.proc, w.log), *((p, tmp / f"streams-{i}.log") for i, p in enumerate(extra, 1))]
            firsts = [await started(p, log, "first fetch") for p, log in procs]
            times = await output_times(bootstrap, w.topics.summaries, lambda v: len(v) >= w.summaries, 1800)
            cpu = [cpu_s(p.pid) - c0 for (p, _), (_, c0) in zip(procs, firsts)]  # once the last summary was read
            await asyncio.sleep(5.0)
            rss = [status_kib(p.pid, "VmRSS") for p, _ in procs]
            hwm = [status_kib(p.pid, "VmHWM") for p, _ in procs]
        finally:
            for p in extra:
                stop(p)
        stop(w.proc)  # a clean stop snapshots every node's state into the changelog
        changelog = await read_to_end(bootstrap, f"{app_id(w.settings)}-node-state-changelog", PARTITIONS)
        latest = {r.key: len(r.value or b"") for r in changelog if not r.key.startswith(b"\x00")}
        return {"catch_up_s": times[-1] - min(t for t, _ in firsts), "cpu_s": cpu, "rss_kib": rss, "hwm_kib": hwm,
                "state_bytes": sum(latest.values()), "nodes": len(latest)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--workers", type=int, default=1, help="workers of one group reading the backlog together")
    a = ap.parse_args()
    bootstrap, started_here = broker()
    records = list(simulate(a.nodes, a.hours))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            w = asyncio.run(worker_run(bootstrap, records, Path(tmp), a.workers))
    finally:
        if started_here:
            subprocess.run([str(REPO / "scripts" / "kafka-local"), "stop"], timeout=120)
    alone = engine_alone(a.nodes, a.hours)
    mib = 1024.0
    from gpuwarden.contract import NodeSnapshot

    gpu_samples = sum(len(r.gpus) for r in records if type(r) is NodeSnapshot)
    cpu = sum(w["cpu_s"])
    who = "one worker" if a.workers == 1 else f"{a.workers} workers"
    print(f"worker memory: {a.hours:g} h backlog, {a.nodes} nodes x 8 GPUs, {len(records):,} records, "
          f"{PARTITIONS} partitions, {who} from scratch (caught up in {w['catch_up_s']:.1f} s, "
          f"worker CPU {cpu:.1f} s: {gpu_samples / cpu:,.0f} GPU-samples per CPU-s)")
    for i, (c, rss, hwm) in enumerate(zip(w["cpu_s"], w["rss_kib"], w["hwm_kib"])):
        label = "worker, once caught up: " if a.workers == 1 else f"worker {i + 1}, caught up:"
        print(f"  {label} RSS {rss / mib:7.1f} MiB   peak {hwm / mib:7.1f} MiB   CPU {c:.1f} s")
    print(f"  snapshotted node state {w['state_bytes'] / 1e3:.0f} kB ({w['state_bytes'] / max(1, w['nodes']) / 1e3:.0f} kB/node)")
    print(f"  engine alone, same input: RSS {alone['rss_kib'] / mib:7.1f} MiB   peak {alone['hwm_kib'] / mib:7.1f} MiB   "
          f"node state {alone['state_bytes'] / 1e3:.0f} kB")
    print(json.dumps({"records": len(records), "workers": a.workers, "worker_rss_mib": round(max(w["rss_kib"]) / mib, 1),
                      "worker_peak_mib": round(max(w["hwm_kib"]) / mib, 1), "state_kb": round(w["state_bytes"] / 1e3),
                      "engine_rss_mib": round(alone["rss_kib"] / mib, 1),
                      "engine_peak_mib": round(alone["hwm_kib"] / mib, 1), "catch_up_s": round(w["catch_up_s"], 1),
                      "worker_cpu_s": round(cpu, 1)}))


if __name__ == "__main__":
    main()
