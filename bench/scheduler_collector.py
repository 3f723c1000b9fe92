"""Scheduler collector cost per poll with a deep queue, against the ``squeue --json`` call itself,
and the engine's scheduler stage on the same polls.

A real Slurm (scripts/slurm-local, its own directory) with ``--jobs`` held jobs (pending,
reason ``JobHeldUser``) plus four running ones. Per round, alternating: (a) ``squeue --all
--json`` alone, timed as the collector would run it (wall, and the child's CPU); (b) what the
collector adds per poll: parsing that JSON into ``scheduler_job/1`` records and encoding them for
the wire (its own CPU); (c) the scheduler stage (``SchedulerStage``, key cluster) taking that
poll's records, decoded from the wire as a worker gets them, up to and including the poll's end
(figures, baselines, rules, allocations): its CPU per job record. The first round's (c) creates
every job's track and is reported apart; medians of ``--rounds``.

Usage: .venv/bin/python bench/scheduler_collector.py [--jobs 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuwarden.contract import SCHEDULER_RECORDS, SchedulerPoll, decode, encode  # noqa: E402
from gpuwarden.producers.slurm import jobs  # noqa: E402
from gpuwarden.streams.config import EngineConfig  # noqa: E402
from gpuwarden.streams.schedstage import SchedulerStage  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    local = {**os.environ, "SLURM_LOCAL_DIR": tempfile.mkdtemp(prefix="gw-bench-slurm-")}
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm-local"), "start"], env=local,
                       capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit(f"slurm-local start failed: {p.stderr.strip()}")
    env = {**os.environ, "SLURM_CONF": p.stdout.strip().splitlines()[-1].removeprefix("SLURM_CONF=")}
    try:
        t0 = time.monotonic()

        def submit(i: int) -> None:
            held = i >= 4
            subprocess.run(["sbatch", *(["--hold"] if held else []), "-J", f"bench-{i}", "-c", "1",
                            f"--output={local['SLURM_LOCAL_DIR']}/slurm-%j.out",  # not the working directory
                            "--gres=gpu:1", "--wrap", "sleep 3600"], env=env, capture_output=True, check=True)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(submit, range(args.jobs)))
        print(f"submitted {args.jobs} jobs in {time.monotonic() - t0:.0f} s (4 running, the rest held)")
        call_wall, call_cpu, parse_cpu, engine_cpu = [], [], [], []
        stage = SchedulerStage(EngineConfig())
        for _ in range(args.rounds):
            c0, w0 = children_cpu(), time.perf_counter()
            out = subprocess.run(["squeue", "--all", "--json"], env=env, capture_output=True, check=True).stdout
            call_wall.append(time.perf_counter() - w0)
            call_cpu.append(children_cpu() - c0)
            p0 = time.process_time()
            ts = time.time()
            records = jobs(json.loads(out), "bench", ts)
            encoded = [encode(r) for r in records]
            wire = sum(map(len, encoded))
            parse_cpu.append(time.process_time() - p0)
            encoded.append(encode(SchedulerPoll(ts=ts, cluster="bench", scheduler="slurm", jobs=len(records))))
            e0 = time.process_time()
            for raw in encoded:
                stage.process(decode(raw, SCHEDULER_RECORDS))
            engine_cpu.append(time.process_time() - e0)
        n = len(records)
        med = statistics.median
        print(f"queue: {n} jobs in squeue's JSON ({len(out) / 2**20:.1f} MiB), {wire / 2**20:.1f} MiB as records")
        print(f"(a) squeue --all --json            wall {med(call_wall) * 1e3:8.1f} ms   CPU {med(call_cpu) * 1e3:8.1f} ms")
        print(f"(b) collector: parse + records      CPU {med(parse_cpu) * 1e3:8.1f} ms   "
              f"({med(parse_cpu) / n * 1e6:.1f} µs per job)")
        steady = engine_cpu[1:] or engine_cpu
        print(f"(c) engine: scheduler stage        CPU {med(steady) * 1e3:8.1f} ms   "
              f"({med(steady) / n * 1e6:.1f} µs per job record; first poll {engine_cpu[0] * 1e3:.0f} ms, "
              "decode included)")
        print(f"(b)/(a) CPU {med(parse_cpu) / med(call_cpu):.2f}x, (c)/(a) {med(steady) / med(call_cpu):.2f}x; per "
              f"round (a) CPU {', '.join(f'{c * 1e3:.0f}' for c in call_cpu)} ms, (b) "
              f"{', '.join(f'{c * 1e3:.0f}' for c in parse_cpu)} ms, (c) {', '.join(f'{c * 1e3:.0f}' for c in engine_cpu)} ms")
        print(json.dumps({"jobs": n, "squeue_wall_ms": round(med(call_wall) * 1e3, 1),
                          "squeue_cpu_ms": round(med(call_cpu) * 1e3, 1),
                          "collector_cpu_ms": round(med(parse_cpu) * 1e3, 1),
                          "collector_us_per_job": round(med(parse_cpu) / n * 1e6, 2),
                          "engine_cpu_ms": round(med(steady) * 1e3, 1),
                          "engine_us_per_job": round(med(steady) / n * 1e6, 2),
                          "engine_first_poll_cpu_ms": round(engine_cpu[0] * 1e3, 1)}))
    finally:
        subprocess.run([sys.executable, str(ROOT / "scripts" / "slurm-local"), "stop"], env=local, capture_output=True)


if __name__ == "__main__":
    main()
