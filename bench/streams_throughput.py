"""Engine alone vs the stream worker on real Kafka, this checkout against an earlier revision's.

Same simulated data for all (seeded ``mixed``, 8-GPU nodes, 1 s ticks):

(a) engine alone: ``bench/engine_throughput.py:measure`` (CPU time of this process);
(b) end to end: one ``gpuwarden streams`` worker (subprocess) started on input topics
    loaded beforehand with agent-style records (one NodeSnapshot per node per tick, plus
    the GPU events); time from its first fetch (its log line) to the last task summary on
    ``task.summaries`` (Kafka record timestamp), i.e. until the worker has consumed everything
    and emitted what the in-process engine emits;
    (b+) the same with the task metrics too (~2.5 per snapshot, keyed by node like the rest),
    loaded as the agent publishes them: one ``task_metrics/1`` batch per node and tick;
    (b) and (b+) also run from ``--before`` (a git revision, checked out in a temporary
    worktree; by default the last one on faust-streaming, run with the faust it pinned from
    ``.cache/faust-site``), so the cost of the runtime per record is measured in the same run.

The target is (b)'s GPU-samples per second of the worker's CPU time (``TARGET_PER_CPU_S``):
wall time on a shared machine (broker and worker share the cores) also counts the broker's
share. All read a backlog (a worker catching up after an outage, or a replay), loaded
compressed as the agent's publisher sends it (``gpuwarden.producers.publisher.COMPRESSION``):
timed from the first send instead, the worker raced this script's producer for the same cores.
``bench/scale_run.py`` measures the live case. The worker's CPU time is all its threads', from
/proc/<pid>/task/*/schedstat, read when its first-fetch line appears (polled every 5 ms) and at
the end. Kafka: ``$KAFKA_BOOTSTRAP``, else ``scripts/kafka-local start`` (stopped again only if
this run started it).

This machine's speed drifts by up to 2x within minutes (a shared VM: the same worker run took
0.84 to 1.59 s in one session), so the runs go ``--rounds`` times, alternating, and the figures
are the medians; each round's are printed too.

    .venv/bin/python bench/streams_throughput.py [--nodes 4] [--minutes 15] [--rounds 5] [--before REV] [--json]

``--before dd039fc`` is the last revision that sent one Kafka record per task metric (public API).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

from tests.streams_kafka.workers import checkout, cli_module, cpu_s  # noqa: E402

PARTITIONS = 4
#: GPU-samples per second of one worker's CPU time, end to end, task metrics included (issue #29).
TARGET_PER_CPU_S = 30_000
#: The last revision whose workers ran on faust-streaming (its topology, read order and sender).
BEFORE = "e71bcaa"
END = b"END"


def broker() -> tuple[str, bool]:
    """(bootstrap, started here)."""
    env = os.environ.get("KAFKA_BOOTSTRAP", "").strip()
    if env:
        return env, False
    tool = str(REPO / "scripts" / "kafka-local")
    status = subprocess.run([tool, "status"], capture_output=True, text=True, timeout=30)
    if status.returncode == 0:
        return status.stdout.split()[1], False
    proc = subprocess.run([tool, "start"], capture_output=True, text=True, timeout=240)
    if proc.returncode != 0:
        raise SystemExit(f"scripts/kafka-local start failed: {proc.stderr.strip()}")
    return proc.stdout.strip().splitlines()[-1].strip(), True


async def delete_topics(bootstrap: str, prefix: str) -> None:
    """Every topic a run made (inputs, outputs, changelogs), so each run leaves the broker as
    it found it: with 2,209 topics left by earlier runs and tests, the session-5 worker's (b)
    took 1.17 s (median of 5), on a fresh broker 0.64 s (the clients' metadata refreshes)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


async def send(bootstrap: str, records: list[tuple[str, bytes | None, bytes, float]]) -> None:
    """(topic, key, value, ts) in order, all acknowledged, each stamped with its record's time
    as a live agent's send is (a backlog loaded in a minute would otherwise have every record
    stamped within that minute: the worker reads its inputs by their stamps)."""
    from aiokafka import AIOKafkaProducer

    from gpuwarden.producers.publisher import COMPRESSION  # as the agents send

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_batch_size=1 << 20,
                                compression_type=COMPRESSION)
    await producer.start()
    try:
        futs = [await producer.send(t, value=v, key=k, timestamp_ms=int(ts * 1000)) for t, k, v, ts in records]
        await producer.flush()
        for f in futs:
            await f
    finally:
        await producer.stop()


async def output_times(bootstrap: str, topic: str, want: Any, timeout: float) -> list[float]:
    """Kafka timestamps (s) of the records in ``topic`` once ``want(values)`` holds (stage 1's
    progress reports in ``task.summaries`` left out). One ``read_committed`` consumer reads on
    as the worker commits: reading the topic again from the start every 0.5 s took CPU from
    the worker on a 2-core box (a new client each time) and got worse as the topic grew."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from gpuwarden.streams.progress import is_progress

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                isolation_level="read_committed", auto_offset_reset="earliest")
    await consumer.start()
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got: list[Any] = []
        async with asyncio.timeout(timeout):
            while not want([r.value for r in got]):
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r for r in batch if not is_progress(r.headers))
        return sorted(r.timestamp / 1000.0 for r in got)
    finally:
        await consumer.stop()


async def started(proc: subprocess.Popen, log: Path, marker: str, timeout: float = 120.0) -> tuple[float, float]:
    """(wall time in the worker's ``marker`` log line, the worker's CPU seconds when it appeared)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if marker in line:
                return line_time(line), cpu_s(proc.pid)
        if proc.poll() is not None:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
            raise RuntimeError(f"worker exited with {proc.returncode}; its log ends:\n{tail}")
        await asyncio.sleep(0.005)
    raise TimeoutError(f"no {marker!r} in {log} after {timeout:.0f} s")


def line_time(line: str) -> float:
    """Epoch seconds of a worker log line (``YYYY-mm-dd HH:MM:SS,mmm`` at its start, or in brackets
    as faust-era workers wrote it; local time)."""
    stamp = line[line.index("[") + 1:line.index("]")] if line.startswith("[") else line[:23]
    return time.mktime(time.strptime(stamp[:19], "%Y-%m-%d %H:%M:%S")) + int(stamp[20:23]) / 1000.0


def faust_site(tree: Path) -> Path | None:
    """For a revision whose workers ran on faust-streaming (no longer a dependency): the faust
    it pinned, with its own dependencies, installed once into ``.cache/faust-site`` (``pip install
    --target``, ahead of this checkout's packages on the path); else None."""
    pin = next((line.strip().strip('",') for line in (tree / "pyproject.toml").read_text().splitlines()
                if line.strip().startswith('"faust-streaming')), None)
    if pin is None:
        return None
    site = REPO / ".cache" / "faust-site"
    if not (site / "faust").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(site), pin], check=True)
    return site


def worker(cmd: list[str], log: Path, tree: Path | None = None) -> subprocess.Popen:
    """``cmd`` with this checkout's code, or ``tree``'s (a worktree of another revision)."""
    out = log.open("wb")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (tree, faust_site(tree)) if p is not None)
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=tree or REPO, env=env)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


def batched_wire(tree: Path | None) -> bool:
    """Whether ``tree``'s (else this checkout's) contract takes task metrics in batches."""
    return "task_metrics/1" in (tree or REPO).joinpath("gpuwarden", "contract.py").read_text()


def wire(records: list[Any], batched: bool) -> list[Any]:
    """The records as a worker of that wire format reads them: task metrics batched per node and
    tick, or (a revision before the batches) one record each, encoded as that reader decodes them."""
    from gpuwarden.contract import batch_task_metrics

    return list(batch_task_metrics(records)) if batched else records


def load_row(topics: Any, r: Any) -> tuple[str, bytes, bytes, float]:
    """(topic, key, value, ts) of one record to load (a lone task metric, for an old peer,
    on ``task.metrics`` under its node)."""
    from gpuwarden.contract import TaskMetric, encode, record_key

    if type(r) is TaskMetric:
        return topics.metrics, r.node.encode(), encode(r), r.ts
    return topics.for_record(r), record_key(r).encode(), encode(r), r.ts


def kept(specs: dict[str, Any]) -> dict[str, Any]:
    """The bench's topics kept whatever their records' age (``retention.ms=-1``): the backlog is
    stamped with its records' event time (yesterday, for a day-aligned run that is the same input
    every day), and a broker's time-based retention (scripts/kafka-local: 24 h) deleted it while
    the worker read it. The topics are the bench's own and deleted at its end."""
    from dataclasses import replace

    return {t: replace(s, config={**s.config, "retention.ms": "-1"}) for t, s in specs.items()}


@asynccontextmanager
async def backlog_worker(bootstrap: str, records: list[Any], tmp: Path,
                         tree: Path | None = None) -> AsyncIterator[Backlog]:
    """``records`` loaded on fresh topics (compressed as agents send), then one worker started
    on them; stopped, and its topics deleted, on the way out."""
    import yaml

    from gpuwarden.app.settings import validate_settings
    from gpuwarden.contract import Topics
    from gpuwarden.streams.engine import Engine

    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    settings = validate_settings({"kafka": {"bootstrap": bootstrap, "topic_prefix": prefix,
                                            "partitions": PARTITIONS}})
    topics = Topics(prefix)
    probe = Engine(config=settings.engine)  # what the worker emits (no end-of-input flush)
    probe.process_many(records)
    from gpuwarden.kafka import ensure_topics
    from gpuwarden.topics import data_topics

    # all of them: a send to a missing one would auto-create it
    await ensure_topics({"bootstrap_servers": bootstrap}, kept(data_topics(topics)), partitions=PARTITIONS,
                        replication_factor=1)
    loaded = [load_row(topics, r) for r in wire(records, batched_wire(tree))]
    await send(bootstrap, loaded)
    config = tmp / "gpuwarden.yaml"
    # the engine at its defaults: an earlier revision refuses keys it does not know
    config.write_text(yaml.safe_dump(settings.model_dump(mode="json", include={"kafka", "limits"})))
    log = tmp / "streams.log"
    proc = worker([sys.executable, "-m", cli_module(tree), "-v", "streams", "--config", str(config),
                   "--worker-id", "bench", "--data-dir", str(tmp / "streams")], log, tree)
    try:
        yield Backlog(proc, log, settings, topics, probe.summaries, len(loaded))
    finally:
        stop(proc)
        await delete_topics(bootstrap, prefix)


@dataclass
class Backlog:
    """A worker reading a loaded backlog: what it must emit (``summaries``) and where."""

    proc: subprocess.Popen
    log: Path
    settings: Any
    topics: Any
    summaries: int
    loaded: int  # Kafka records


async def topology_run(bootstrap: str, records: list[Any], tmp: Path,
                       tree: Path | None = None) -> tuple[float, float, int]:
    """(wall seconds from the worker's first fetch to the last task summary the engine
    gives, its CPU seconds meanwhile, the Kafka records it read), one worker (``tree``: another
    revision's)."""
    async with backlog_worker(bootstrap, records, tmp, tree) as w:
        t0, c0 = await started(w.proc, w.log, "first fetch")  # the worker's first batch, at INFO (-v)
        times = await output_times(bootstrap, w.topics.summaries, lambda v: len(v) >= w.summaries, 600)
        return times[-1] - t0, cpu_s(w.proc.pid) - c0, w.loaded


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--scenario", default="mixed")
    ap.add_argument("--rounds", type=int, default=5, help="alternating runs of every variant; medians reported")
    ap.add_argument("--before", default=BEFORE, metavar="REV",
                    help=f"also run (b) and (b+) from this git revision (default {BEFORE}; '' for none)")
    ap.add_argument("--json", action="store_true", help="end with one JSON line of the figures")
    a = ap.parse_args()

    from engine_throughput import measure, simulate

    from gpuwarden.contract import TaskMetric

    records = simulate(a.scenario, a.nodes, a.minutes)
    samples_only = [r for r in records if not isinstance(r, TaskMetric)]
    alone = measure(records)
    gpu_samples = alone["gpu_samples"]
    bootstrap, started = broker()
    rounds: list[dict[str, tuple[float, float, int]]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="streams-bench-") as tmp, \
                (checkout(a.before) if a.before else nullcontext()) as before:
            for i in range(a.rounds):
                r: dict[str, tuple[float, float, int]] = {}
                for name, recs in (("b", samples_only), ("b+", records)):
                    r[name] = asyncio.run(topology_run(bootstrap, recs, Path(tmp)))
                    if before is not None:
                        r[f"{name} before"] = asyncio.run(topology_run(bootstrap, recs, Path(tmp), before))
                rounds.append(r)
                print(f"  round {i + 1}: " + ", ".join(f"({k}) {s:.2f} s / {c:.2f} CPU-s" for k, (s, c, _) in r.items()),
                      flush=True)
    finally:
        if started:
            subprocess.run([str(REPO / "scripts" / "kafka-local"), "stop"], capture_output=True, timeout=120)

    def median(run: str, i: int) -> float:
        return statistics.median(r[run][i] for r in rounds)

    runs = list(rounds[0])
    figures: dict[str, Any] = {
        "scenario": a.scenario, "nodes": a.nodes, "gpus_per_node": 8, "minutes": a.minutes,
        "records": len(records), "records_without_task_metrics": len(samples_only), "gpu_samples": gpu_samples,
        "engine_gpu_samples_per_s_core": round(alone["gpu_samples_per_s"]), "rounds": a.rounds,
        "before": a.before or None, "target_gpu_samples_per_worker_cpu_s": TARGET_PER_CPU_S,
    }
    keys = {"b": "e2e", "b+": "e2e_with_task_metrics", "b before": "before_e2e",
            "b+ before": "before_e2e_with_task_metrics"}
    for run in runs:
        wall, cpu = median(run, 0), median(run, 1)
        k = keys[run]
        figures.update({f"{k}_kafka_records": rounds[0][run][2], f"{k}_seconds": round(wall, 2), f"{k}_gpu_samples_per_s": round(gpu_samples / wall),
                        f"{k}_worker_cpu_s": round(cpu, 3),
                        f"{k}_gpu_samples_per_worker_cpu_s": round(gpu_samples / cpu)})
    if "b before" in runs:
        # What the worker of this checkout costs per input record over the one of --before, where
        # both read the same Kafka records (a --before from before the task-metric batches reads
        # more records in (b+): its figures per record are not comparable there, its CPU-s are).
        for run in ("b", "b+"):
            n, m = rounds[0][run][2], rounds[0][f"{run} before"][2]
            if n == m:
                extra = [(r[run][1] - r[f"{run} before"][1]) / n * 1e6 for r in rounds]
                figures[f"{keys[run]}_vs_before_us_per_record"] = round(statistics.median(extra), 1)
    figures["e2e_vs_engine"] = round(figures["e2e_gpu_samples_per_s"] / figures["engine_gpu_samples_per_s_core"], 3)
    per_cpu = figures["e2e_with_task_metrics_gpu_samples_per_worker_cpu_s"]  # the target counts task metrics in
    figures["target_met"] = per_cpu >= TARGET_PER_CPU_S
    print(f"streams throughput: {a.scenario}, {a.nodes} nodes x 8 GPUs, {a.minutes:g} min at 1 s ticks, "
          f"{len(records):,} records, {gpu_samples:,} GPU-samples, {PARTITIONS} partitions; "
          f"medians of {a.rounds} alternating rounds")
    print(f"  (a) engine alone (CPU, 1 core)        {figures['engine_gpu_samples_per_s_core']:>10,} GPU-samples/s")
    labels = {"b": "(b) stream worker, end to end", "b before": f"    same, before ({a.before})",
              "b+": "(b+) same, with task metrics", "b+ before": f"     same, before ({a.before})"}
    for run in ("b", "b before", "b+", "b+ before"):
        if run not in runs:
            continue
        k = keys[run]
        print(f"  {labels[run]:<38}{figures[f'{k}_gpu_samples_per_s']:>10,} GPU-samples/s wall, "
              f"{figures[f'{k}_gpu_samples_per_worker_cpu_s']:>8,} per worker CPU-s "
              f"({figures[f'{k}_seconds']:.2f} s wall, {figures[f'{k}_worker_cpu_s']:.2f} CPU-s)")
    print(f"  (b+) per worker CPU-s {per_cpu:,} (target >= {TARGET_PER_CPU_S:,}: "
          f"{'met' if figures['target_met'] else 'NOT met'})   "
          f"(b)/(a) {figures['e2e_vs_engine']:.3f}")
    if "b before" in runs:
        per = []
        for run in ("b", "b+"):
            k = keys[run]
            line = f"({run}) {figures[f'{k}_kafka_records']:,} vs {figures[f'before_{k}_kafka_records']:,} Kafka records"
            if f"{k}_vs_before_us_per_record" in figures:
                line += f", {figures[f'{k}_vs_before_us_per_record']:+.1f} µs of worker CPU per record"
            per.append(line)
        print(f"  against {a.before}: " + "; ".join(per))
    if a.json:
        print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()
