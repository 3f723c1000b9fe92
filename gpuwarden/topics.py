"""Topics are created by the processes that use them, never by the broker's auto-creation.

A broker with ``auto.create.topics.enable`` (Kafka's default) creates a topic on the first
produce or metadata request with ``num.partitions`` (default 1), whatever ``kafka.partitions``
says; a stage whose co-partitioned inputs then differ in partition count cannot join their
records. So every process that writes or reads the pipeline's topics (agent, scheduler collector,
stream workers, notifier, imports) first asks an admin client for the topics it needs, creates
those missing with ``kafka.partitions`` and ``kafka.replication_factor``, and learns the counts of
those that exist; the stream worker refuses to start when a group's counts disagree
(docs/streams-kafka.md, "Topics").
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.contract import Topics

#: Kafka's error code for a topic that exists (a racing creator got there first): not an error here.
TOPIC_ALREADY_EXISTS = 36
#: A topic just created has no leader for a moment; this long for every partition to get one.
LEADERS_S = 30.0


@dataclass(frozen=True)
class TopicSpec:
    """How to create a topic that is missing: its partitions (``None``: ``kafka.partitions``) and configs."""

    partitions: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)


class TopicError(Exception):
    """The broker refused to create a topic (bad replication factor, a policy); says which and why."""


def data_topics(topics: Topics) -> dict[str, TopicSpec]:
    """The pipeline's record topics (what agents, collectors and imports write, what workers derive
    and the notifier reads): created by whichever process comes first, all with ``kafka.partitions``."""
    return {t: TopicSpec() for t in topics.all() if t != topics.control}


async def ensure_topics(client_kw: Mapping[str, Any], specs: Mapping[str, TopicSpec], *, partitions: int,
                        replication_factor: int) -> dict[str, int]:
    """Create the topics of ``specs`` that are missing; returns every one's partition count once
    each partition has a leader. Raises :class:`gpuwarden.kafka.KafkaConnectError` when the
    cluster cannot be reached and :class:`TopicError` when it refuses a topic."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from gpuwarden.kafka import start_client

    admin = AIOKafkaAdminClient(**client_kw)
    await start_client(admin, dict(client_kw))
    try:
        counts = await _counts(admin, list(specs))
        new = [NewTopic(t, s.partitions or partitions, replication_factor, topic_configs=dict(s.config))
               for t, s in specs.items() if t not in counts]
        if new:
            resp = await admin.create_topics(new)
            refused = [f"{e[0]}: {e[-1] or f'error {e[1]}'}" for e in resp.topic_errors
                       if e[1] not in (0, TOPIC_ALREADY_EXISTS)]
            if refused:
                raise TopicError("the broker refused to create topics: " + "; ".join(refused))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LEADERS_S
        while True:
            counts = await _counts(admin, list(specs), led=True)
            missing = sorted(set(specs) - set(counts))
            if not missing:
                return counts
            if loop.time() > deadline:
                raise TopicError(f"topics without a leader after {LEADERS_S:.0f} s: {', '.join(missing)}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def _counts(admin: Any, names: list[str], led: bool = False) -> dict[str, int]:
    """Partition counts of the topics among ``names`` that exist (with ``led``: whose every
    partition has a leader). Only topics the cluster lists are described: aiokafka's
    ``describe_topics`` is a metadata request that lets the broker auto-create what it names."""
    existing = set(await admin.list_topics()) & set(names)
    out = {}
    for d in await admin.describe_topics(sorted(existing)) if existing else []:
        parts = d["partitions"]
        if d["error_code"] == 0 and parts and (not led or all(p["leader"] >= 0 for p in parts)):
            out[d["topic"]] = len(parts)
    return out


def partition_mismatch(counts: Mapping[str, int], groups: Iterable[Iterable[str]]) -> list[str]:
    """A line per group of co-partitioned topics whose partition counts differ, naming each count."""
    out = []
    for group in groups:
        names = [t for t in group if t in counts]
        if len({counts[t] for t in names}) > 1:
            out.append("co-partitioned topics differ: " + ", ".join(f"{t} has {counts[t]}" for t in names))
    return out
