"""The cluster task: one partition of ``scheduler.jobs`` (key cluster) through the scheduler stage.

Transitions go to ``alerts``; job allocations to ``scheduler.allocations`` (key node), which the
node task reads with its other inputs (the allocated-versus-used join); after them, this
partition's progress to every ``scheduler.allocations`` partition: the last poll closed over its
clusters, so stage 1 judges allocation-dependent rules only that far (docs/scheduler.md, "The
scheduler watermark"). A malformed record goes to ``scheduler.jobs.dlq`` with the reason.
"""

from __future__ import annotations

from typing import Any

from gpuwarden.contract import SCHEDULER_RECORDS, StageProgress, Topics, encode
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.dlq import Consumed, Limits, Outbound
from gpuwarden.streams.keyed import KeyedRunner, Source
from gpuwarden.streams.progress import Reporter, partition_watermark
from gpuwarden.streams.schedstage import SchedulerStage
from gpuwarden.streams.statewire import SCHED_TABLE
from gpuwarden.streams.task import Batch, Task, TaskId, report


class ClusterTask(Task):
    def __init__(self, tid: TaskId, topics: Topics, engine: EngineConfig, limits: Limits, *,
                 stage: SchedulerStage, allocation_partitions: int) -> None:
        self.topics, self.stage, self.allocation_partitions = topics, stage, allocation_partitions
        self.lateness = float(engine.summary_lateness)
        self.reporter = Reporter(float(engine.eval_interval))
        self.clusters: set[str] = set()
        runner = KeyedRunner(stage, {topics.jobs: Source(SCHEDULER_RECORDS, cluster_of, Topics.dlq(topics.jobs))},
                             self._emit, limits)
        super().__init__(tid, (topics.jobs,), {SCHED_TABLE: runner})
        self.runner = runner

    def apply(self, batch: Batch) -> list[Outbound]:
        self.beyond = batch.beyond
        return self.runner.run(batch.records.get(self.topics.jobs, ()), batch.now).out

    def _emit(self, record: Any, msg: Consumed) -> list[Outbound]:
        self.clusters.add(record.cluster)
        trs, allocs = self.stage.process(record)
        t = self.topics
        return [*(Outbound(t.alerts, x.fingerprint.encode(), encode(x)) for x in trs),
                *(Outbound(t.allocations, a.node.encode(), encode(a)) for a in allocs)]

    def reports(self, wall: float) -> list[Outbound]:
        marks = [self.stage.position(c) for c in sorted(self.clusters)]
        catching = self.topics.jobs in self.beyond
        progress = StageProgress(partition=self.id.partition, catching_up=catching, nodes=len(marks),
                                 watermark=partition_watermark(marks, catching, self.lateness))
        return report(self.reporter, wall, self.topics.allocations, self.allocation_partitions, progress)

    def dump(self) -> dict[str, Any]:
        return {**super().dump(), "clusters": sorted(self.clusters)}

    def load(self, data: Any) -> None:
        super().load(data)
        self.clusters = set(data["clusters"])


def cluster_of(record: Any) -> str:
    return record.cluster  # type: ignore[no-any-return]
