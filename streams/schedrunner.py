"""The scheduler stage in cluster mode: its keyed runner over ``scheduler.jobs`` (key cluster).

Kept out of ``gpuwarden.streams.topology`` so the faust wiring only routes the topic's batches
here (``KeyedRunner.run``) and stores the envelopes in its table. A malformed record goes to
``scheduler.jobs.dlq`` with the reason (the runner's boundary decoding); transitions go to
``alerts``; the job allocations to ``scheduler.allocations``, key node, which stage 1 reads
with its other inputs (the allocated-versus-used join).
"""

from __future__ import annotations

from typing import Any

from gpuwarden.contract import SCHEDULER_RECORDS, Topics, encode
from gpuwarden.streams.dlq import Consumed, Limits, Outbound
from gpuwarden.streams.keyed import KeyedRunner, Source
from gpuwarden.streams.schedstage import SchedulerStage


def scheduler_runner(stage: SchedulerStage, topics: Topics, limits: Limits, checkpoint_s: float,
                     partition_of: dict[str, int]) -> KeyedRunner:
    """The runner the topology feeds ``topics.jobs`` batches to; ``partition_of`` is kept up to
    date with the partition each cluster's records come from (its progress reports say so)."""

    def emit(record: Any, msg: Consumed) -> list[Outbound]:
        partition_of[record.cluster] = msg.partition
        trs, allocs = stage.process(record)
        return [*(Outbound(topics.alerts, t.fingerprint.encode(), encode(t)) for t in trs),
                *(Outbound(topics.allocations, a.node.encode(), encode(a)) for a in allocs)]

    return KeyedRunner(stage, {
        topics.jobs: Source(SCHEDULER_RECORDS, cluster_of, Topics.dlq(topics.jobs)),
    }, emit, limits, checkpoint_s)


def cluster_of(record: Any) -> str:
    return record.cluster
