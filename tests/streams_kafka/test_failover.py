"""Simulated agent → topics → two `gpuwarden streams` workers → alerts; one is SIGKILLed mid-run.

The other worker takes the dead one's partitions over, recovers their state from
the changelog and goes on. The expected transitions come from the pure Engine
run in-process on the same records: after dedup by (fingerprint, state,
started_at) the topic must hold exactly that set — nothing lost, nothing extra.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.contract import Topics, encode
from gpuwarden.kafka import produce_records as send_records
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.statewire import app_id
from tests.kafka_support import create_topic
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.workers import group_members, read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SPAN_S = 2 * 3600.0
CHUNK_S = 300.0  # produce 5 min of event time at a time, like a live fleet sped up


def simulated(start_ts: float) -> list[Any]:
    sim = Simulator(["mixed"], nodes=4, gpus=4, seed=7, start_ts=start_ts, tick_s=10.0, onset_s=900.0)
    return list(sim.run(SPAN_S))


async def produce_records(bootstrap: str, topics: Topics, records: list[Any], partitions: int = PARTITIONS) -> None:
    """Send in event-time chunks, paced, so the topics advance together as from live agents:
    within a chunk in ts order across topics, as an agent sends them. Event time runs ~1500x
    faster than wall time here, so the workers' allowed lateness must cover a chunk."""
    chunks: dict[int, list[Any]] = {}
    for r in records:
        chunks.setdefault(int(r.ts // CHUNK_S), []).append(r)
    for _, chunk in sorted(chunks.items()):
        await send_records(sorted(chunk, key=lambda r: r.ts), {"bootstrap_servers": bootstrap}, topics.prefix,
                           partitions=partitions)
        await asyncio.sleep(0.2)


async def run_with_one_killed(bootstrap: str, settings: Any, records: list[Any], victim: Any) -> None:
    """Once both workers are in the group: the first half, wait for a first alert, SIGKILL
    ``victim``, then the second half."""
    topics = Topics(settings.kafka.topic_prefix)
    half = len(records) // 2

    async def both_in_group() -> bool:
        return await group_members(bootstrap, app_id(settings)) == 2

    async def some_alerts() -> bool:
        return len(await read_to_end(bootstrap, topics.alerts, settings.kafka.partitions)) > 0

    await wait_for(both_in_group, "two workers in the consumer group")
    await produce_records(bootstrap, topics, records[:half])
    await wait_for(some_alerts, "first alerts")
    victim.kill()
    await produce_records(bootstrap, topics, records[half:])


async def test_worker_killed_mid_run_no_transition_lost_or_duplicated(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # Catching up on the backlog after the takeover, one input topic's fetch can run ahead of
    # another's; the lateness covers it (see docs/streams-faust.md).
    # Stage 2 likewise: after the takeover the dead worker's nodes' summaries trail the others'
    # by up to the whole second half (1 h of event time); the class waits for them.
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS, allowed_lateness="30m",
                            summary_lateness="2h")
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(kafka_bootstrap, t, partitions=PARTITIONS)
    records = simulated(time.time() - SPAN_S - 600)
    engine = Engine(config=settings.engine)
    expected = set(transition_ids([encode(t) for t in engine.process_many(records)]))
    assert len(expected) >= 5, expected  # the scenario must give the test something to lose
    config = write_config(tmp_path / "gpuwarden.yaml", settings)

    async def alerts() -> list[tuple[str, str, float]]:
        return transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])

    with workers(config, tmp_path, "w1", "w2") as (w1, w2):
        await run_with_one_killed(kafka_bootstrap, settings, records, w1)

        async def all_alerts() -> bool:
            return expected <= set(await alerts())

        try:
            await wait_for(all_alerts, "every expected transition after the takeover", poll=2)
        finally:
            values = [r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)]
            got = transition_ids(values)
            print(f"failover: {len(records)} records, {len(expected)} expected transitions, "
                  f"{len(got)} on the topic, {len(got) - len(set(got))} duplicates (at-least-once); "
                  f"missing {sorted(expected - set(got))[:6]}, extra {sorted(set(got) - expected)[:6]}")
        assert w2.alive(), w2.tail()

    missing, extra = expected - set(got), set(got) - expected
    assert not missing, sorted(missing)[:5]  # nothing lost
    assert not extra, sorted(extra)[:5]  # both stages give exactly the in-process transitions
    assert max(Counter(got).values()) >= 1
