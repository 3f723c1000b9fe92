"""Topics created by the processes that use them (placeholder until the topics branch lands)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError

from gpuwarden.config import KafkaConfig
from gpuwarden.kafka import kafka_kwargs, start_client


@dataclass(frozen=True)
class TopicSpec:
    partitions: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int | None = None


async def ensure_topics(kafka: KafkaConfig, specs: Mapping[str, TopicSpec]) -> dict[str, int]:
    kw = kafka_kwargs(kafka)
    admin = AIOKafkaAdminClient(**kw)
    await start_client(admin, kw)
    try:
        known = set(await admin.list_topics())
        new = [NewTopic(t, s.partitions or kafka.partitions, s.replication_factor or kafka.replication_factor,
                        topic_configs=dict(s.config)) for t, s in specs.items() if t not in known]
        if new:
            try:
                await admin.create_topics(new)
            except TopicAlreadyExistsError:
                pass
        for _ in range(100):
            described = await admin.describe_topics(list(specs))
            counts = {d["topic"]: len(d["partitions"]) for d in described if d["error_code"] == 0 and d["partitions"]
                      and all(p["leader"] >= 0 for p in d["partitions"])}
            if len(counts) == len(specs):
                return counts
            await asyncio.sleep(0.1)
        raise RuntimeError(f"topics without leaders: {sorted(set(specs) - set(counts))}")
    finally:
        await admin.close()


def partition_mismatch(counts: Mapping[str, int], groups: Iterable[Iterable[str]]) -> list[str]:
    out = []
    for g in groups:
        g = list(g)
        if len({counts[t] for t in g if t in counts}) > 1:
            out.append("co-partitioned topics differ: " + ", ".join(f"{t} has {counts.get(t)}" for t in g))
    return out
