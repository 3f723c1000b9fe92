"""Live latency of a GPU fallen off the bus: the agent sees XID 79 → the on-call receiver has the page.

Usage: .venv/bin/python bench/alert_latency.py [--faults 6] [--before TREE]

A live pipeline as ``gpuwarden run`` wires it (``app/standalone.py``'s ``Runner``: records to the
spool and through the ``Engine`` with the default config, 30 s ``allowed_lateness`` included,
transitions into the ``Notifier``: default routing tree, PagerDuty delivery), fed by the
simulator in live mode: one tick per second of wall time, event time = wall time. Every
``SPACING_S`` one more GPU of the node reports XID 79 (a ``GpuEvent`` added to that tick's
records, as the agent's XID watcher would hand it over). Latency = the time a loopback server
shaped like PagerDuty Events v2 (``tests/fakes/http.py``'s ``FakePagerDuty``) receives the
trigger for that GPU − the wall time the tick with the event was handed to the pipeline.

``--kafka BOOTSTRAP``: the same through Kafka, as the cluster runs it: the agent's ``Publisher``
(spool first) sends each tick to ``gpu.samples``/``gpu.events``; a real ``gpuwarden streams``
worker (stage 1 → ``alerts``) and a real ``gpuwarden notify`` worker (router → delivery), both
subprocesses with the default engine config, carry it to the same loopback server.

``--before TREE`` runs the same measurement first on another checkout (its own ``.venv``; e.g.
a worktree of main) in the same run; the peer floor is a bare httpx POST of a fixed event to the
same server. Each tree runs in its own subprocess. The last line is JSON (bench/run_all.py).
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
KEY = "0123456789abcdef0123456789abcdef"  # PagerDuty routing keys are 32 characters
SPACING_S = 3.0  # wall time between two faults
WARMUP_TICKS = 5  # the node is known to the engine before the first fault
WAIT_S = 90.0  # after the last fault, how long pages may take (main's: lateness + a bucket)


def _receiver(pd_url: str) -> dict:
    from gpuwarden.notifiers.receivers import Receiver

    os.environ["BENCH_PD_KEY"] = KEY
    receiver = {"name": "pd", "pagerduty": {"routing_key": {"env": "BENCH_PD_KEY"}, "url": pd_url}}
    if "accept_simulated" in Receiver.model_fields:  # simulated alerts page only receivers that opt in
        receiver["accept_simulated"] = True
    return {"receivers": [receiver], "team": "pd", "owners": {"default": "pd"}, "escalation": [{"receivers": ["pd"]}]}


async def _faults(faults: int, pd: Any, handle: Callable[[list], Awaitable[None]]) -> list[float]:
    """Live ticks of one simulated 8-GPU node with XID 79 on one more GPU every ``SPACING_S``, each
    batch to ``handle``; the latency of each fault's page at ``pd`` (seconds)."""
    from gpuwarden.contract import GpuEvent
    from gpuwarden.producers.simulator import Simulator
    from gpuwarden.producers.xid import lookup

    sim = Simulator("healthy", nodes=1, gpus=8, seed=0, start_ts=float(int(time.time())), tick_s=1.0)
    node = sim.nodes[0]
    plan = {WARMUP_TICKS + int(i * SPACING_S): i for i in range(faults)}
    seen: dict[int, float] = {}
    paged: dict[int, float] = {}
    tick, due = 0, time.monotonic()
    last = max(plan) + WARMUP_TICKS
    while len(paged) < faults and (tick <= last or time.monotonic() - due < WAIT_S):
        records = sim.step()
        if tick in plan:
            gpu = plan[tick]
            records.append(GpuEvent(node=node.name, seq=10_000 + gpu, boot_id=node.boot_id, ts=records[0].ts,
                                    kind="xid", source="kmsg", code=79, gpu_index=gpu,
                                    gpu_uuid=node.gpus[gpu].uuid, catalogue=lookup(79), simulated=True,
                                    message=f"NVRM: Xid (PCI:0000:{gpu:02x}:00): 79, GPU has fallen off the bus."))
            seen[gpu] = time.time()
        await handle(records)
        for r in list(pd.requests):
            ev = r.json
            comp = ev.get("payload", {}).get("component")
            if ev.get("event_action") == "trigger" and "XID" in ev["payload"]["summary"] and comp is not None:
                paged.setdefault(int(comp), r.at)
        tick += 1
        due += 1.0
        await asyncio.sleep(max(0.0, due - time.monotonic()))
    return [paged[g] - seen[g] for g in sorted(seen) if g in paged]


async def _floor(pd: Any) -> float:
    """Median ms of a bare POST of a fixed trigger to the same server."""
    import httpx

    floor = []
    async with httpx.AsyncClient() as client:
        for _ in range(20):
            before = len(pd.requests)
            t0 = time.time()
            await client.post(pd.base + "/v2/enqueue", json={
                "routing_key": KEY, "event_action": "trigger", "dedup_key": "floor",
                "payload": {"summary": "XID 79", "source": "bench", "severity": "critical"}})
            floor.append(pd.requests[before].at - t0)
    return statistics.median(floor) * 1e3


def _figures(faults: int, lat: list[float], floor_ms: float) -> dict:
    return {"faults": faults, "paged": len(lat), "p50_s": statistics.median(lat) if lat else None,
            "max_s": max(lat) if lat else None, "latencies_s": [round(x, 3) for x in lat], "floor_p50_ms": floor_ms}


async def measure(faults: int) -> dict:
    """``gpuwarden run``'s path; runs inside the tree's own interpreter."""
    from gpuwarden.app.settings import validate_settings
    from gpuwarden.app.standalone import Runner
    from gpuwarden.contract import Topics
    from gpuwarden.notifiers.pipeline import Notifier
    from gpuwarden.spool import Spool
    from gpuwarden.streams.engine import Engine
    from tests.fakes.http import FakePagerDuty

    with FakePagerDuty() as pd, tempfile.TemporaryDirectory() as d, Spool(Path(d) / "s.db") as spool:
        settings = validate_settings({"notify": _receiver(pd.base + "/v2/enqueue")})
        runner = Runner(Engine(config=settings.engine), spool, Topics(""), json_out=None, record=None,
                        notifier=None, state_key="bench")
        notifier = runner.notifier = Notifier(settings, spool=spool, clock=lambda: runner.now)
        lat = await _faults(faults, pd, runner.batch)
        await notifier.aclose()
        return _figures(faults, lat, await _floor(pd))


async def measure_kafka(faults: int, bootstrap: str) -> dict:
    """Agent → Kafka → ``gpuwarden streams`` → ``alerts`` → ``gpuwarden notify`` → receiver."""
    import yaml

    from gpuwarden.contract import Topics
    from gpuwarden.producers.publisher import Publisher
    from gpuwarden.spool import Spool
    from gpuwarden.streams.statewire import app_id
    from tests.fakes.http import FakePagerDuty
    from tests.kafka_support import create_topic
    from tests.streams_kafka.records import settings_for
    from tests.streams_kafka.workers import group_members, wait_for, workers, write_config

    settings = settings_for(bootstrap, partitions=1)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.alerts):
        await create_topic(bootstrap, t, partitions=1)
    with FakePagerDuty() as pd, tempfile.TemporaryDirectory() as d, Spool(Path(d) / "agent.db") as spool:
        tmp = Path(d)
        cfg = write_config(tmp / "streams.yaml", settings)
        notify_cfg = tmp / "notify.yaml"
        notify_cfg.write_text(yaml.safe_dump({
            "kafka": settings.kafka.model_dump(mode="json"), "spool": {"path": str(tmp / "notify.db")},
            "notify": {**_receiver(pd.base + "/v2/enqueue"), "consumer_group": "bench-" + settings.kafka.topic_prefix}}))
        log = (tmp / "notify.log").open("wb")
        notify = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "notify", "--config", str(notify_cfg)],
                                  stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        publisher = Publisher(spool, bootstrap, topics, partitions=1)
        try:
            with workers(cfg, tmp, "w1"):
                async def joined() -> bool:
                    return await group_members(bootstrap, app_id(settings)) == 1

                await wait_for(joined, "the stream worker in its consumer group", bound=90)
                await asyncio.sleep(5.0)  # assignment done; the notify worker has joined its group too

                async def publish(records: list) -> None:
                    publisher.submit(records)
                    await publisher.pump()

                lat = await _faults(faults, pd, publish)
        finally:
            await publisher.close()
            notify.terminate()
            notify.wait(timeout=30)
            log.close()
        return _figures(faults, lat, await _floor(pd))


def run_tree(tree: Path, faults: int, kafka: str | None) -> dict:
    """``measure`` (or ``measure_kafka``) in ``tree``'s own interpreter, ``tree`` first on the path."""
    python = tree / ".venv" / "bin" / "python"
    call = f"b.measure({faults})" if kafka is None else f"b.measure_kafka({faults}, {kafka!r})"
    code = (f"import sys, asyncio, json; sys.path.insert(0, {str(tree)!r}); sys.path.insert(0, {str(ROOT / 'bench')!r});"
            f"import alert_latency as b; print(json.dumps(asyncio.run({call})))")
    p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tree, timeout=600)
    if p.returncode != 0:
        raise SystemExit(f"{tree}: {p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--faults", type=int, default=6, help="XID 79 faults, one GPU each (at most 8)")
    ap.add_argument("--before", type=Path, default=os.environ.get("BENCH_BEFORE"),
                    help="another checkout with its own .venv, measured first (default $BENCH_BEFORE)")
    ap.add_argument("--kafka", metavar="BOOTSTRAP", default=os.environ.get("KAFKA_BOOTSTRAP"),
                    help="also through Kafka and real stream/notify workers (default $KAFKA_BOOTSTRAP)")
    a = ap.parse_args()
    trees = ([("before", a.before.resolve())] if a.before else []) + [("after", ROOT)]
    paths = [("run", None)] + ([("kafka", a.kafka)] if a.kafka else [])
    summary: dict = {}
    print(f"live XID 79 → PagerDuty-shaped loopback server, {a.faults} faults, 1 s ticks, allowed_lateness 30 s; "
          "seconds from the tick that carried the event to the receiver's trigger")
    for path, kafka in paths:
        print("gpuwarden run (engine → router → delivery):" if kafka is None else
              "agent → Kafka → gpuwarden streams → alerts → gpuwarden notify:")
        for name, tree in trees:
            r = run_tree(tree, a.faults, kafka)
            p50 = "-" if r["p50_s"] is None else f"{r['p50_s']:.3f}"
            mx = "-" if r["max_s"] is None else f"{r['max_s']:.3f}"
            print(f"  {name:6}  paged {r['paged']}/{r['faults']}   p50 {p50} s   max {mx} s   "
                  f"(bare POST {r['floor_p50_ms']:.2f} ms)   {r['latencies_s']}")
            summary.update({f"{path}_{name}_p50_s": r["p50_s"], f"{path}_{name}_max_s": r["max_s"],
                            f"{path}_{name}_paged": r["paged"]})
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
