"""Scale run: N simulated GPUs at 1 Hz through real Kafka into two ``gpuwarden streams`` workers.

Usage: .venv/bin/python bench/scale_run.py [--gpus 10000] [--seconds 300] [--step-down 0.5] [--before REV]
Needs a broker: $KAFKA_BOOTSTRAP, else the one ``scripts/kafka-local`` runs.

Producer: one NodeSnapshot per node (8 GPUs, processes attributed) per second
of wall time, from the seeded simulator's ``healthy`` fleet; one tick is encoded
once and re-stamped (``ts``, ``seq``) each second, so producing costs little CPU.
Consumers: two worker subprocesses in one consumer group over 8 partitions.
Every 5 s the consumer lag (end offsets minus the group's committed offsets on
gpu.samples) is sampled. Committed offsets trail what the workers applied by up to one
``engine.commit_interval`` by design (a task's transaction commits its offsets), so *held* means the lag over the last half of the run is at most
10 s of input beyond that allowance and not growing, and the producer kept the rate (it
shares the machine with the broker and the workers). If not held, the GPU count is stepped
down (× ``--step-down``, 60 s each) until a step holds: that is the ceiling. The workers' CPU
time over the run (all threads, /proc) is reported as cores. ``--before REV`` runs the first step
again with that git revision's workers (a temporary worktree), after this checkout's.
The last line is JSON (for bench/run_all.py).
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
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness lives under tests/

from gpuwarden.contract import NodeSnapshot, Topics, encode  # noqa: E402
from gpuwarden.producers.publisher import COMPRESSION  # noqa: E402
from gpuwarden.producers.simulator import Simulator  # noqa: E402
from gpuwarden.streams.statewire import app_id  # noqa: E402
from tests.kafka_support import create_topic  # noqa: E402
from tests.streams_kafka.records import settings_for  # noqa: E402
from tests.streams_kafka.workers import (  # noqa: E402
    checkout,
    cpu_s,
    group_members,
    wait_for,
    workers,
    write_config,
)

PARTITIONS = 8
SAMPLE_S = 5.0
TS0, SEQ0 = 1_700_000_000.0, 0


def bootstrap() -> str:
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return os.environ["KAFKA_BOOTSTRAP"]
    p = subprocess.run([sys.executable, "scripts/kafka-local", "start"], capture_output=True, text=True, timeout=300)
    return p.stdout.strip().splitlines()[-1]


def templates(gpus: int) -> list[tuple[bytes, bytes]]:
    """(key, value) per node for one tick, with ts and seq as replaceable tokens."""
    sim = Simulator("healthy", nodes=max(1, gpus // 8), gpus=8, start_ts=TS0, tick_s=1.0)
    out = []
    for r in sim.step():
        if isinstance(r, NodeSnapshot):
            v = encode(r.model_copy(update={"ts": TS0, "seq": SEQ0}))
            out.append((r.node.encode(), v))
    return out


def stamp(value: bytes, ts: float, seq: int) -> bytes:
    return value.replace(b'"ts":1700000000.0', b'"ts":%.1f' % ts, 1).replace(b'"seq":0,', b'"seq":%d,' % seq, 1)


async def lag(admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer, group: str, topic: str) -> int:
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    end = await consumer.end_offsets(tps)
    committed = await admin.list_consumer_group_offsets(group, partitions=tps)
    return sum(end[tp] - max(0, committed[tp].offset if tp in committed else 0) for tp in tps)


async def step(bs: str, gpus: int, seconds: float, tmp: Path, tree: Path | None = None) -> dict:
    settings = settings_for(bs, partitions=PARTITIONS)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(bs, t, partitions=PARTITIONS)
    tpl = templates(gpus)
    config = write_config(tmp / f"gw-{gpus}.yaml", settings)
    producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=20, compression_type=COMPRESSION, acks=1,
                                max_request_size=16 << 20)
    admin = AIOKafkaAdminClient(bootstrap_servers=bs)
    probe = AIOKafkaConsumer(bootstrap_servers=bs)
    await producer.start(), await admin.start(), await probe.start()
    series: list[tuple[float, int]] = []
    produced = 0
    try:
        with workers(config, tmp, f"s{gpus}-a", f"s{gpus}-b", tree=tree) as ws:
            async def ready() -> bool:
                return await group_members(bs, app_id(settings)) == 2

            await wait_for(ready, "two workers in the group", bound=120)
            cpu0 = sum(cpu_s(w.proc.pid) for w in ws)
            t0 = time.monotonic()
            next_sample = t0 + SAMPLE_S
            tick = 0
            while time.monotonic() - t0 < seconds:
                ts = time.time()
                for key, value in tpl:
                    await producer.send(topics.samples, stamp(value, ts, tick), key=key)
                produced += len(tpl)
                tick += 1
                if time.monotonic() >= next_sample:
                    next_sample += SAMPLE_S
                    series.append((time.monotonic() - t0, await lag(admin, probe, app_id(settings), topics.samples)))
                await asyncio.sleep(max(0.0, t0 + tick - time.monotonic()))
            await producer.flush()
            alive = sum(w.alive() for w in ws)
            cores = (sum(cpu_s(w.proc.pid) for w in ws if w.alive()) - cpu0) / (time.monotonic() - t0)
    finally:
        await producer.stop(), await admin.close(), await probe.stop()
    per_s = len(tpl)
    tail = [lag_ for t, lag_ in series if t >= seconds / 2] or [series[-1][1]]
    growing = len(tail) > 2 and statistics.linear_regression(range(len(tail)), tail).slope > per_s * 0.5
    allowance_s = 10.0 + float(settings.engine.commit_interval)
    held = max(tail) <= allowance_s * per_s and not growing and alive == 2 and produced >= 0.95 * per_s * seconds
    consumed = produced - series[-1][1] if series else 0
    return {"gpus": len(tpl) * 8, "seconds": seconds, "target_gpu_samples_per_s": per_s * 8,
            "produced_snapshots": produced, "produced_gpu_samples_per_s": produced * 8 / seconds,
            "sustained_gpu_samples_per_s": consumed * 8 / seconds,
            "max_lag_snapshots_last_half": max(tail), "lag_allowed_snapshots": int(allowance_s * per_s),
            "lag_growing": growing, "held": held, "worker_cores": round(cores, 2),
            "lag_series": [lag_ for _, lag_ in series]}


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--step-down", type=float, default=0.5)
    ap.add_argument("--step-seconds", type=float, default=60.0)
    ap.add_argument("--before", default="", metavar="REV",
                    help="also run the first step with this git revision's workers")
    args = ap.parse_args()
    bs = bootstrap()
    runs = []
    with tempfile.TemporaryDirectory() as d:
        gpus, seconds = args.gpus, args.seconds
        while True:
            r = await step(bs, gpus, seconds, Path(d))
            runs.append(r)
            print(f"{r['gpus']:6d} GPUs at 1 Hz for {seconds:.0f} s: target {r['target_gpu_samples_per_s']} "
                  f"GPU-samples/s, produced {r['produced_gpu_samples_per_s']:.0f}/s, consumed (sustained) "
                  f"{r['sustained_gpu_samples_per_s']:.0f}/s, max lag (last half) "
                  f"{r['max_lag_snapshots_last_half']} snapshots (allowed {r['lag_allowed_snapshots']}), "
                  f"growing {r['lag_growing']}, workers {r['worker_cores']:.2f} cores → "
                  f"{'HELD' if r['held'] else 'NOT HELD'}", flush=True)
            print(f"    lag every {SAMPLE_S:.0f} s: {r['lag_series']}", flush=True)
            if r["held"] or gpus <= 8:
                break
            gpus, seconds = max(8, int(gpus * args.step_down) // 8 * 8), args.step_seconds
        before = None
        if args.before:
            with checkout(args.before) as tree:
                if tree is not None:
                    before = await step(bs, args.gpus, args.seconds, Path(d), tree)
                    print(f"before ({args.before}): {before['gpus']} GPUs, max lag (last half) "
                          f"{before['max_lag_snapshots_last_half']} snapshots, workers "
                          f"{before['worker_cores']:.2f} cores → {'HELD' if before['held'] else 'NOT HELD'}",
                          flush=True)
    first, last = runs[0], runs[-1]
    ceiling = last["gpus"] if last["held"] else None
    print(f"{first['gpus']} GPUs: {'held' if first['held'] else 'not held'}; "
          f"ceiling {ceiling if ceiling else 'below ' + str(last['gpus'])} GPUs at 1 Hz "
          f"(ratio to target {((ceiling or 0) / first['gpus']):.2f})")
    figures = {"gpus": first["gpus"], "held": first["held"], "ceiling_gpus": ceiling,
               "sustained_gpu_samples_per_s": first["sustained_gpu_samples_per_s"],
               "worker_cores": first["worker_cores"],
               "ratio_ceiling_to_target": (ceiling or 0) / first["gpus"]}
    if before is not None:
        figures.update(before=args.before, before_held=before["held"], before_worker_cores=before["worker_cores"])
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
