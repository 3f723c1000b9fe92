"""What the stream-worker fault tests check after the faults: the alerts against the engine's, and
the consumer group's committed offsets against the inputs' end offsets."""

from __future__ import annotations

import time
from collections import Counter
from typing import NamedTuple

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from tests.streams_kafka.workers import wait_for

Id = tuple[str, str, float]


async def group_lag(bootstrap: str, group: str, topics: list[str], partitions: int) -> int:
    """Records on the inputs past the group's committed offsets (last stable offsets: what a
    read_committed member can reach; every transaction is closed once the workers are idle)."""
    tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    await admin.start()
    await reader.start()
    try:
        committed = await admin.list_consumer_group_offsets(group, partitions=tps)
        ends = await reader.end_offsets(tps)
    finally:
        await reader.stop()
        await admin.close()
    return sum(max(0, ends[tp] - max(0, committed[tp].offset if tp in committed else 0)) for tp in tps)


async def at_the_end(bootstrap: str, group: str, topics: list[str], partitions: int, since: float,
                     within: float) -> tuple[int, float]:
    """(lag, seconds since ``since``) once the lag reached 0, or the lag after ``within``. The workers'
    progress reports keep coming: what counts is that the lag reached 0."""
    async def caught_up() -> bool:
        return await group_lag(bootstrap, group, topics, partitions) == 0

    try:
        await wait_for(caught_up, within, "committed offsets at the end offsets", poll=1)
        lag = 0
    except TimeoutError:
        lag = await group_lag(bootstrap, group, topics, partitions)  # the assertions say how far
    return lag, time.monotonic() - since


class Compared(NamedTuple):
    """Transitions read against those expected: lost, unexpected, and read more than once."""

    missing: set[Id]
    extra: set[Id]
    twice: list[Id]


def compare(want: list[Id], got: list[Id]) -> Compared:
    return Compared(set(want) - set(got), set(got) - set(want), sorted(t for t, n in Counter(got).items() if n > 1))
