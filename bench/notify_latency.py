"""Latency from an alert record acknowledged by Kafka to a fake Feishu bot receiving it.

Usage: .venv/bin/python bench/notify_latency.py [ALERTS] [RATE_PER_S]
Needs a broker: $KAFKA_BOOTSTRAP, else the one ``scripts/kafka-local`` runs.

Critical alerts (no group_wait) go through the real worker loop
(``gpuwarden.notifiers.worker.run_notify``: aiokafka consumer group, decode, router,
delivery with rate limits, delivery log in the spool) to four fake Feishu bots
on loopback, one per project, paced below Feishu's 100/min per bot so the
figure is the pipeline's, not the platform's limit. p50/p99 are per alert.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fakes live under tests/

from gpuwarden.app.settings import validate_settings  # noqa: E402
from gpuwarden.contract import AlertTransition, Topics, encode  # noqa: E402
from gpuwarden.notifiers.worker import Stats, run_notify  # noqa: E402
from tests.fakes.http import FakeFeishu  # noqa: E402
from tests.kafka_support import create_topic, unique_topic  # noqa: E402

BOTS = 4


def bootstrap() -> str:
    env = os.environ.get("KAFKA_BOOTSTRAP")
    if env:
        return env
    out = subprocess.run([sys.executable, "scripts/kafka-local", "status"], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("no broker: start one with scripts/kafka-local start or set KAFKA_BOOTSTRAP")
    return out.stdout.split()[1]


async def main(n: int, rate: float) -> None:
    boot, prefix = bootstrap(), unique_topic("bench-lat") + "."
    topics = Topics(prefix)
    fakes = [FakeFeishu() for _ in range(BOTS)]
    for i, f in enumerate(fakes):
        f.__enter__()
        os.environ[f"GW_BENCH_BOT{i}"] = f.base + f.hook
    tmp = tempfile.mkdtemp()
    settings = validate_settings({
        "kafka": {"bootstrap": boot, "topic_prefix": prefix},
        "spool": {"path": str(Path(tmp) / "spool.db")},
        "notify": {
            "receivers": [{"name": f"bot{i}", "feishu": {"url": {"env": f"GW_BENCH_BOT{i}"}}} for i in range(BOTS)],
            "consumer_group": f"bench-{prefix}", "tick_interval": "200ms",
            "route": {"receivers": [], "group_by": ["..."], "group_wait": "0s",
                      "routes": [{"matchers": [f"project=p{i}"], "receiver": f"bot{i}"} for i in range(BOTS)]},
        }})
    await create_topic(boot, topics.alerts, partitions=4)
    stop = asyncio.Event()
    worker = asyncio.create_task(run_notify(settings, stop=stop, stats=Stats()))
    producer = AIOKafkaProducer(bootstrap_servers=boot, linger_ms=0)
    await producer.start()
    sent: dict[str, float] = {}
    try:
        await asyncio.sleep(3)  # consumer group join
        start = time.monotonic()
        for i in range(n):
            await asyncio.sleep(max(0.0, start + i / rate - time.monotonic()))
            now = time.time()
            fp = f"lat{i:05d}"
            t = AlertTransition(fingerprint=fp, rule="xid_79", tier="critical", state="firing", started_at=now,
                                ts=now, summary=f"bench {fp}", labels={"node": f"node-{i % 32:02d}",
                                                                       "project": f"p{i % BOTS}"})
            sent[fp] = time.time()
            await producer.send_and_wait(topics.alerts, encode(t), key=fp.encode())
        deadline = time.monotonic() + 30
        while sum(len(f.accepted) for f in fakes) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        stop.set()
        await worker
        await producer.stop()
        for f in fakes:
            f.__exit__()
    got: dict[str, float] = {}
    for f in fakes:
        for rec in f.accepted:
            for fp in sent:
                if fp in rec.raw.decode() and fp not in got:
                    got[fp] = rec.at
    lat = sorted((got[fp] - sent[fp]) * 1000 for fp in got)
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else lat * 99
    print(f"notify latency: {n} critical alerts at {rate:g}/s over {BOTS} Feishu bots; received {len(lat)}/{n}")
    print(f"p50 {q[49]:8.1f} ms   p99 {q[98]:8.1f} ms   max {lat[-1]:8.1f} ms   "
          f"p99 / 1 s target {q[98] / 1000:5.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200,
                     float(sys.argv[2]) if len(sys.argv) > 2 else 5.0))
