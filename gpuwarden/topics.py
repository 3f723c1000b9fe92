"""Topics are created by the processes that use them, never by the broker's auto-creation.

A broker with ``auto.create.topics.enable`` (Kafka's default) creates a topic on the first
produce or metadata request with ``num.partitions`` (default 1), whatever ``kafka.partitions``
says; a stage whose co-partitioned inputs then differ in partition count cannot join their
records. So every process that writes or reads the pipeline's topics (agent, scheduler collector,
stream workers, notifier, imports) first asks an admin client for the topics it needs, creates
those missing with ``kafka.partitions`` and ``kafka.replication_factor``, and learns the counts of
those that exist; the stream worker refuses to start when a group's counts disagree
(docs/streams-kafka.md, "Topics"). What a process needs is named here; ``gpuwarden.kafka.ensure_topics``
makes it so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpuwarden.contract import Topics

@dataclass(frozen=True)
class TopicSpec:
    """How to create a topic that is missing: its partitions (``None``: ``kafka.partitions``) and configs."""

    partitions: int | None = None
    config: Mapping[str, str] = field(default_factory=dict)


def data_topics(topics: Topics) -> dict[str, TopicSpec]:
    """The pipeline's record topics (what agents, collectors and imports write, what workers derive
    and the notifier reads): created by whichever process comes first, all with ``kafka.partitions``."""
    return {t: TopicSpec() for t in topics.all() if t != topics.control}


#: The notifier's silences, acks and on-call overrides: one partition (one order for all of them),
#: compacted to the latest of each key.
CONTROL = TopicSpec(partitions=1, config={"cleanup.policy": "compact"})


def partition_mismatch(counts: Mapping[str, int], groups: Iterable[Iterable[str]]) -> list[str]:
    """A line per group of co-partitioned topics whose partition counts differ, naming each count."""
    out = []
    for group in groups:
        names = [t for t in group if t in counts]
        if len({counts[t] for t in names}) > 1:
            out.append("co-partitioned topics differ: " + ", ".join(f"{t} has {counts[t]}" for t in names))
    return out
