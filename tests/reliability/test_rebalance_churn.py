"""Rebalance churn under traffic: every 30 s a worker joins and the longest-running one leaves.

Two workers start; while 2 h of the ``mixed`` fleet's event time is produced over 5 minutes,
every ``EVERY_S`` a new ``gpuwarden streams`` worker is started and the oldest stopped (SIGTERM:
it commits at the rebalance barrier and leaves the group), so every task moves several times,
often while a restore of it is still running elsewhere. Expected (issue #29): the ``alerts``
topic read committed equals ``Engine.process_many`` of the same records — none lost, none
unexpected, none twice — and the group's committed offsets reach the end offsets (the seconds
after the last record reported; held to 60 s by ``make soak``: tests/reliability/exactness.py).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gpuwarden.contract import Topics, encode
from gpuwarden.kafka import produce_records
from gpuwarden.producers.servingsim import SLO, SERVICES
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.groups import groups
from gpuwarden.streams.statewire import app_id
from tests.reliability.exactness import CAUGHT_UP_BOUND_S, at_the_end, check_caught_up, compare
from tests.reliability.test_random_kills import PARTITIONS, SPAN_S, chunks
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.workers import Worker, group_members, read_to_end, troubles, wait_for, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.long]

CHURN_S = 300.0
EVERY_S = 30.0
MOVES = int(CHURN_S // EVERY_S) - 1  # a worker in and one out every 30 s for 5 min


async def test_a_worker_added_and_one_removed_every_30_s_keeps_the_alerts_exact(
        kafka_bootstrap: str, tmp_path: Path, reliability_report) -> None:
    slo = {service: SLO for service in SERVICES.values()}
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS, allowed_lateness="30m",
                            summary_lateness="3h", slo=slo)
    topics = Topics(settings.kafka.topic_prefix)
    records = list(Simulator("mixed", nodes=8, gpus=8, seed=5, start_ts=time.time() - SPAN_S - 600, tick_s=10.0,
                             onset_s=900.0).run(SPAN_S))
    want = transition_ids([encode(t) for t in Engine(config=settings.engine).process_many(records)])
    parts = chunks(records)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    group = app_id(settings)
    inputs = sorted({t for g in groups(topics).values() for t in g.inputs})
    made = 0

    def start() -> Worker:
        nonlocal made
        made += 1
        run_dir = tmp_path / f"w{made}"
        run_dir.mkdir()
        return Worker(config, f"w{made}", run_dir)

    running = [start(), start()]
    every = list(running)
    moves: list[str] = []

    async def churn() -> None:
        for _ in range(MOVES):  # counted, not timed: a busy machine's slow stops made 8 in 5 min
            await asyncio.sleep(EVERY_S)
            new = start()
            every.append(new)
            running.append(new)
            old = running.pop(0)
            await asyncio.to_thread(old.stop)  # SIGTERM: the barrier commits, the member leaves
            moves.append(f"+{new.worker_id} -{old.worker_id}")

    try:
        async def joined() -> bool:
            return await group_members(kafka_bootstrap, group) == 2

        await wait_for(joined, "2 workers in the consumer group")
        moving = asyncio.create_task(churn())
        for chunk in parts:
            await produce_records(chunk, {"bootstrap_servers": kafka_bootstrap}, topics.prefix,
                                  partitions=PARTITIONS)
            await asyncio.sleep(CHURN_S / len(parts))
        last = time.monotonic()
        await moving
        lag, caught_up_s = await at_the_end(kafka_bootstrap, group, inputs, PARTITIONS, last, CAUGHT_UP_BOUND_S)
        got = transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])
        assert all(w.alive() for w in running), [w.tail() for w in running]
    except BaseException:
        for w in every:
            print(f"--- {w.log} (last 30 lines) ---\n{w.tail(30)}")
        raise
    finally:
        for w in every:
            w.stop()

    missing, extra, twice = compare(want, got)
    reliability_report("rebalance churn: a worker added and one removed every 30 s for 5 min",
                       injected=len(moves), lost=len(missing),
                       detail=f"{', '.join(moves)}; {len(want)} transitions expected, {len(got)} read committed: "
                              f"{len(missing)} lost, {len(extra)} unexpected, {len(twice)} twice; group at the end "
                              f"offsets {caught_up_s:.0f} s after the last record (lag {lag})")
    assert len(moves) == MOVES, moves
    assert not missing, sorted(missing)[:5]
    assert not extra, sorted(extra)[:5]
    assert not twice, twice[:5]
    check_caught_up(lag, caught_up_s)
    assert not (trouble := troubles(*(w.log for w in every))), trouble
