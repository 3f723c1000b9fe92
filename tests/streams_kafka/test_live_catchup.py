"""Records produced far faster than real time while a worker runs (an agent draining its spool
after an outage): the worker emits what the in-process engine emits, at the default lateness.

The worker catches up with the producer, and aiokafka's fetcher reads a partition's
high-water mark only while it holds no records of it, so one topic's mark can be older
than another topic's records in hand. Judged caught up from such a mark, a node was released
past snapshots not fetched yet, which were then dropped as late: 4 of 4 runs of this test
failed (272 summaries for the engine's 269) before ``find_behind`` in streams/topology.py
compared when each mark was read.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer

from gpuwarden.contract import TaskMetric, Topics, encode, record_key
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.statewire import app_id
from tests.kafka_support import create_topic
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.workers import group_members, read_summaries, read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 4


async def test_records_produced_while_the_worker_catches_up_are_not_dropped(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS)  # allowed lateness 30 s
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(kafka_bootstrap, t, partitions=PARTITIONS)
    # recent event time: older than limits.max_past_skew (7 d) the workers dead-letter it
    sim = Simulator("mixed", nodes=4, gpus=8, seed=1, start_ts=time.time() - 3600, tick_s=1.0)
    records = [r for r in sim.run(15 * 60) if not isinstance(r, TaskMetric)]
    engine = Engine(config=settings.engine)
    expected_alerts = set(transition_ids([encode(t) for t in engine.process_many(records)]))
    assert engine.summaries > 200 and expected_alerts, "the scenario must give the test something to lose"

    async def summaries() -> list[tuple[str, str, float]]:
        return [(s.node, s.task, s.ts) for s in await read_summaries(kafka_bootstrap, topics.summaries, PARTITIONS)]

    async def alerts() -> set[tuple[str, str, float]]:
        return set(transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)]))

    async def everything() -> bool:
        # Stage 2 releases a class's last summaries after the progress reports behind them
        # (streams/progress.py): its transitions may come a batch after the last summary.
        return len(await summaries()) >= engine.summaries and await alerts() >= expected_alerts

    with workers(write_config(tmp_path / "gpuwarden.yaml", settings), tmp_path, "w1") as (w1,):
        async def joined() -> bool:
            return await group_members(kafka_bootstrap, app_id(settings)) == 1

        await wait_for(joined, "the worker in the consumer group")
        await asyncio.sleep(3.0)  # assignment done: the worker reads as the records arrive
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=0, max_batch_size=1 << 20)
        await producer.start()
        try:  # as fast as the producer goes, in ts order across topics
            sent = [await producer.send(topics.for_record(r), key=record_key(r).encode(), value=encode(r))
                    for r in records]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
        try:
            await wait_for(everything, f"{engine.summaries} task summaries and every transition", poll=1)
        except TimeoutError:
            pass  # the assertions below say what is missing
        finally:
            got = await summaries()
            print(f"live catch-up: {len(records)} records, {engine.summaries} summaries expected, {len(got)} "
                  f"on the topic; worker log tail:\n{w1.tail(5)}")
        got_alerts = await alerts()
        assert w1.alive(), w1.tail()

    assert max(Counter(got).values()) == 1  # one worker, no restart: nothing read twice
    assert len(got) == engine.summaries
    assert got_alerts == expected_alerts
