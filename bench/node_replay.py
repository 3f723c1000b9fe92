"""The node tasks' CPU on a real worker's catch-up, replayed in-process: this checkout against ``--before``.

A worker's CPU on a backlog (bench/worker_memory.py) drifts by up to 30 % between runs on a shared
machine, more than most changes to the engine. So this records once what one ``gpuwarden streams``
worker read on bench/worker_memory.py's backlog (seeded ``mixed``, task metrics included): every
input record with its offset, and the node tasks' batch log (each batch's end offsets, inputs
still behind and wall clock: what makes a batch). Then each revision's node tasks apply exactly
those batches in a fresh process (``Task.apply``; the collector tuned as a worker tunes it), and
each batch's outputs are checked against the digest the worker logged. The two revisions run at
the same time, one per core, ``--pairs`` times, so a slower spell of the machine slows both.
Printed per pair: CPU seconds of each and their ratio; then the medians. A revision whose outputs
differ from the recorded worker's is named with the count of differing batches. The worker's
other costs (Kafka client, commits, snapshots, stage 2) are not in these figures.

    .venv/bin/python bench/node_replay.py [--nodes 8] [--hours 2] [--before REV] [--pairs 3]

``--before`` must be a revision with the task runtime (``streams/task.py``, after faust left).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from bisect import bisect_left
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

INPUTS = ("samples", "events", "metrics", "allocations", "inference")


async def record(bootstrap: str, nodes: int, hours: float, path: Path) -> None:
    """Run one worker on the backlog and keep what its node tasks read, batch by batch."""
    from streams_throughput import PARTITIONS, backlog_worker, output_times, started
    from worker_memory import simulate

    from gpuwarden.contract import NodeSnapshot
    from gpuwarden.streams.batchlog import decode_entries
    from gpuwarden.streams.statewire import app_id, batchlog_topic
    from tests.streams_kafka.workers import read_to_end

    records = list(simulate(nodes, hours))
    with tempfile.TemporaryDirectory() as tmp:
        async with backlog_worker(bootstrap, records, Path(tmp)) as w:
            await started(w.proc, w.log, "first fetch")
            await output_times(bootstrap, w.topics.summaries, lambda v: len(v) >= w.summaries, 1800)
            inputs = []  # aiokafka's ConsumerRecords, as the worker read them
            for name in INPUTS:
                inputs += await read_to_end(bootstrap, getattr(w.topics, name), PARTITIONS, 120)
            log = await read_to_end(bootstrap, batchlog_topic(app_id(w.settings), "node"), PARTITIONS, 120)
    batches: dict[int, list] = {}
    for r in log:
        if r.value:
            batches.setdefault(r.partition, []).extend(decode_entries(r.value))
    gpu_samples = sum(len(r.gpus) for r in records if type(r) is NodeSnapshot)
    path.write_bytes(pickle.dumps({"prefix": w.settings.kafka.topic_prefix, "partitions": PARTITIONS,
                                   "inputs": inputs, "batches": batches, "gpu_samples": gpu_samples}))


def replay(path: Path) -> dict[str, Any]:
    """Apply the recorded batches with this process's code; its CPU and the differing digests."""
    from gpuwarden.app.settings import validate_settings
    from gpuwarden.contract import Topics
    from gpuwarden.streams.groups import TaskFactory
    from gpuwarden.streams.memory import tune_gc
    from gpuwarden.streams.task import Batch, TaskId, digest
    from gpuwarden.topics import data_topics

    trace = pickle.loads(path.read_bytes())
    n, topics = trace["partitions"], Topics(trace["prefix"])
    settings = validate_settings({"kafka": {"bootstrap": "replay:9092", "topic_prefix": trace["prefix"],
                                            "partitions": n}})
    factory = TaskFactory(settings, {t: n for t in data_topics(topics)})
    by: dict[tuple[int, str], list] = {}
    for r in trace["inputs"]:  # each partition's in offset order, as read
        by.setdefault((r.partition, r.topic), []).append(r)
    offsets_of = {k: [r.offset for r in rows] for k, rows in by.items()}
    plan = []
    for p, entries in sorted(trace["batches"].items()):
        at: dict[str, int] = {}
        for e in entries:  # the records of each input between the last batch's end and this one's
            records = {}
            for topic, end in e.ends.items():
                rows, offsets = by.get((p, topic), []), offsets_of.get((p, topic), [])
                rows = rows[bisect_left(offsets, at.get(topic, 0)):bisect_left(offsets, end)]
                if rows:
                    records[topic] = rows
                at[topic] = end
            plan.append((p, Batch(records, frozenset(e.beyond), e.now), (e.outputs, e.crc)))
    tasks = {p: factory(TaskId("node", p)) for p in trace["batches"]}
    tune_gc()
    c0 = time.process_time()
    outputs = [(tasks[p].apply(batch), want) for p, batch, want in plan]
    cpu = time.process_time() - c0
    return {"code": str(Path(sys.modules[Batch.__module__].__file__ or "").resolve().parents[1]),  # which tree ran
            "cpu_s": cpu, "batches": len(plan), "differing": sum(digest(out) != want for out, want in outputs),
            "gpu_samples": trace["gpu_samples"]}


def side(tree: Path | None, path: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(tree or REPO)}
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--replay", str(path)],
                            cwd=tree or REPO, env=env, stdout=subprocess.PIPE, text=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--hours", type=float, default=2.0)
    ap.add_argument("--before", default="HEAD~1", metavar="REV")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--replay", type=Path, help=argparse.SUPPRESS)  # one side's run (a subprocess)
    a = ap.parse_args()
    if a.replay:  # imports the revision on PYTHONPATH
        print(json.dumps(replay(a.replay)))
        return
    sys.path[:0] = [str(REPO), str(REPO / "bench")]
    from streams_throughput import broker
    from tests.streams_kafka.workers import checkout

    bootstrap, started_here = broker()
    with tempfile.TemporaryDirectory(prefix="node-replay-") as tmp, checkout(a.before) as before:
        path = Path(tmp) / "trace.pickle"
        try:
            asyncio.run(record(bootstrap, a.nodes, a.hours, path))
        finally:
            if started_here:
                subprocess.run([str(REPO / "scripts" / "kafka-local"), "stop"], capture_output=True, timeout=120)
        if before is None:
            raise SystemExit(f"node_replay: no worktree of {a.before}")
        ratios, runs = [], {"this": [], "before": []}
        for i in range(a.pairs):
            procs = {"this": side(None, path), "before": side(before, path)}
            got = {k: json.loads(p.communicate()[0].strip().splitlines()[-1]) for k, p in procs.items()}
            for k, g in got.items():
                runs[k].append(g)
            ratios.append(got["this"]["cpu_s"] / got["before"]["cpu_s"])
            print(f"  pair {i + 1}: this {got['this']['cpu_s']:.2f} CPU-s ({got['this']['code']}), {a.before} "
                  f"{got['before']['cpu_s']:.2f} CPU-s ({got['before']['code']}), ratio {ratios[-1]:.3f}", flush=True)
    samples = runs["this"][0]["gpu_samples"]
    print(f"node tasks replaying one worker's catch-up ({a.hours:g} h, {a.nodes} nodes x 8 GPUs, "
          f"{runs['this'][0]['batches']} batches), medians of {a.pairs} concurrent pairs:")
    for k, label in (("this", "this checkout"), ("before", a.before)):
        cpu = statistics.median(r["cpu_s"] for r in runs[k])
        bad = max(r["differing"] for r in runs[k])
        print(f"  {label:14s} {cpu:6.2f} CPU-s  {samples / cpu:9,.0f} GPU-samples per CPU-s  "
              f"batches differing from the worker's outputs: {bad}")
    print(f"  ratio this/{a.before}: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
