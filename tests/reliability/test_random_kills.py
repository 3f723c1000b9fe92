"""Stream workers SIGKILLed at random moments from the first seconds on: the alerts stay exact.

2 or 3 ``gpuwarden streams`` workers share 4 partitions of every topic. The simulated ``mixed``
fleet (8 nodes × 8 GPUs, 2 h of event time: node, task-class, scheduler, inference and service
stages all have work) is produced in 5-minute chunks, paced, while a seeded schedule SIGKILLs a
random worker ``KILLS`` times (the first within the first seconds) and starts each again 0–20 s
later, in whatever order that gives (sometimes every worker is down). Expected (issue #29): the
``alerts`` topic read committed (what the notifier reads) holds exactly the in-process
``Engine.process_many`` transitions of the same records — none lost, none unexpected, none twice
— and the group's committed offsets reach the end offsets of every input (within 60 s of the last
record in ``make soak``, a measuring run; elsewhere the seconds are reported: tests/reliability/exactness.py).
The seed is printed; CI runs fixed seeds, ``make soak`` ten random ones
(``GW_SOAK_SEEDS``), ``GW_KILL_SEED=<seed>`` reruns one.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.contract import Topics, encode
from gpuwarden.kafka import produce_records
from gpuwarden.producers.servingsim import SLO, SERVICES
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.groups import groups
from gpuwarden.streams.statewire import app_id
from tests.reliability.exactness import CAUGHT_UP_BOUND_S, at_the_end, check_caught_up, compare
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.workers import Worker, group_members, read_to_end, troubles, wait_for, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.long]

PARTITIONS = 4
KILLS = 6
SPAN_S = 2 * 3600.0
CHUNK_S = 300.0
PACE_S = 2.5  # wall time per 5-min chunk: 24 chunks in ~60 s, the kills spread over them
RESTART_S = (0.0, 20.0)


def seeds() -> list[int]:
    """CI's fixed seeds, ``GW_SOAK_SEEDS`` random ones (``make soak``), or ``GW_KILL_SEED`` (a rerun)."""
    if os.environ.get("GW_KILL_SEED"):
        return [int(os.environ["GW_KILL_SEED"])]
    n = int(os.environ.get("GW_SOAK_SEEDS", "0"))
    return [random.SystemRandom().randrange(1 << 30) for _ in range(n)] if n else [11]


def chunks(records: list[Any]) -> list[list[Any]]:
    """Event-time chunks of ``CHUNK_S``, each in ts order across topics (as agents send them)."""
    out: dict[int, list[Any]] = {}
    for r in records:
        out.setdefault(int(r.ts // CHUNK_S), []).append(r)
    return [sorted(c, key=lambda r: r.ts) for _, c in sorted(out.items())]


@pytest.mark.parametrize("workers", [2, 3], ids=["2-workers", "3-workers"])
@pytest.mark.parametrize("seed", seeds())
async def test_random_kills_keep_the_alerts_exact_and_the_group_commits_to_the_end(
    kafka_bootstrap: str, tmp_path: Path, seed: int, workers: int, reliability_report
) -> None:
    print(f"random kills: seed {seed}, {workers} workers (rerun: GW_KILL_SEED={seed})")
    rng = random.Random(seed)
    slo = {service: SLO for service in SERVICES.values()}
    # Event time runs ~120x faster than wall time: the lateness bounds cover a takeover's pause.
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS, allowed_lateness="30m",
                            summary_lateness="3h", slo=slo)
    topics = Topics(settings.kafka.topic_prefix)
    sim = Simulator("mixed", nodes=8, gpus=8, seed=7, start_ts=time.time() - SPAN_S - 600, tick_s=10.0,
                    onset_s=900.0)
    records = list(sim.run(SPAN_S))
    transitions = Engine(config=settings.engine).process_many(records)
    want = transition_ids([encode(t) for t in transitions])
    rules = {t.rule for t in transitions}
    # not unique: an open alert whose cause changed is sent again under its id (exactness.compare counts)
    assert {"inference-tail-rising", "xid-hardware"} <= rules, sorted(rules)
    parts = chunks(records)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    group = app_id(settings)
    inputs = sorted({t for g in groups(topics).values() for t in g.inputs})
    ids = [f"w{i + 1}" for i in range(workers)]
    starts = Counter[str]()

    def start(worker_id: str) -> Worker:
        starts[worker_id] += 1
        run_dir = tmp_path / f"{worker_id}-{starts[worker_id]}"
        run_dir.mkdir()
        return Worker(config, worker_id, run_dir)

    running: dict[str, Worker | None] = {i: start(i) for i in ids}
    every: list[Worker] = [w for w in running.values() if w is not None]
    killed: list[str] = []
    production = len(parts) * PACE_S
    kill_times = sorted([rng.uniform(1.0, 4.0)] + [rng.uniform(4.0, production) for _ in range(KILLS - 1)])

    async def chaos() -> None:
        began = asyncio.get_running_loop().time()
        restarts: list[asyncio.Task[None]] = []

        async def restart(worker_id: str, after: float) -> None:
            await asyncio.sleep(after)
            w = running[worker_id] = start(worker_id)
            every.append(w)

        for at in kill_times:
            await asyncio.sleep(max(0.0, began + at - asyncio.get_running_loop().time()))
            while not (alive := [i for i, w in running.items() if w is not None and w.alive()]):
                await asyncio.sleep(0.2)  # every worker down: the next kill hits the first one back
            victim = rng.choice(alive)
            w = running[victim]
            assert w is not None
            w.kill()
            running[victim] = None
            after = rng.uniform(*RESTART_S)
            killed.append(f"{victim}@{asyncio.get_running_loop().time() - began:.1f}s+{after:.1f}s")
            restarts.append(asyncio.create_task(restart(victim, after)))
        await asyncio.gather(*restarts)

    async def alerts() -> list[tuple[str, str, float]]:
        return transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])

    try:
        async def joined() -> bool:
            return await group_members(kafka_bootstrap, group) == workers

        await wait_for(joined, f"{workers} workers in the consumer group")
        kills = asyncio.create_task(chaos())
        for chunk in parts:
            await produce_records(chunk, {"bootstrap_servers": kafka_bootstrap}, topics.prefix,
                                  partitions=PARTITIONS)
            await asyncio.sleep(PACE_S)
        last = time.monotonic()  # the last record is out
        await kills
        lag, caught_up_s = await at_the_end(kafka_bootstrap, group, inputs, PARTITIONS, last, CAUGHT_UP_BOUND_S)
        got = await alerts()
        assert all(w is not None and w.alive() for w in running.values()), \
            [w.tail() for w in running.values() if w is not None]
    except BaseException:
        for w in every:
            print(f"--- {w.log} (last 30 lines) ---\n{w.tail(30)}")
        raise
    finally:
        for w in every:
            w.stop()

    missing, extra, twice = compare(want, got)
    reliability_report(f"{workers} stream workers SIGKILLed at random (seed {seed})", injected=len(killed),
                       lost=len(missing),
                       detail=f"kills {', '.join(killed)}; {len(records)} records, {len(want)} transitions expected, "
                              f"{len(got)} read committed: {len(missing)} lost, {len(extra)} unexpected, "
                              f"{len(twice)} twice; group lag {lag} at {caught_up_s:.0f} s after the last record")
    assert len(killed) >= KILLS, killed
    assert not missing, sorted(missing)[:5]
    assert not extra, sorted(extra)[:5]
    assert not twice, twice[:5]
    check_caught_up(lag, caught_up_s)
    assert not (trouble := troubles(*(w.log for w in every))), trouble
