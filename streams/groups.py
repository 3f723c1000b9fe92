"""The stage groups: the co-partitioned inputs each task kind reads, its tables, and its tasks.

A task is one partition index of a group's inputs (Kafka Streams' task): ``node`` reads the four
node-keyed inputs of stage 1 and ``inference.metrics``; ``class`` reads ``task.summaries`` (stage
2); ``service`` reads ``inference.sli``; ``cluster`` reads ``scheduler.jobs``. The inputs of a group
must have one partition count (a worker refuses to start otherwise: docs/streams-kafka.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuwarden.contract import ServiceSli, TaskSummary, Topics
from gpuwarden.streams.classstage import ClassStage
from gpuwarden.streams.clustertask import ClusterTask
from gpuwarden.streams.config import StreamsSettings
from gpuwarden.streams.dlq import Limits
from gpuwarden.streams.gatedtask import GatedTask
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.nodetask import NodeTask
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.schedstage import SchedulerStage
from gpuwarden.streams.servicestage import ServiceStage
from gpuwarden.streams.statewire import CLASS_TABLE, INFERENCE_TABLE, NODE_TABLE, SCHED_TABLE, SERVICE_TABLE
from gpuwarden.streams.task import Task, TaskId


@dataclass(frozen=True)
class Group:
    """A task kind: its input topics and its tables (the first holds the snapshot marker)."""

    name: str
    inputs: tuple[str, ...]
    tables: tuple[str, ...]


def groups(topics: Topics) -> dict[str, Group]:
    t = topics
    return {g.name: g for g in (
        Group("node", (t.samples, t.events, t.metrics, t.allocations, t.inference), (NODE_TABLE, INFERENCE_TABLE)),
        Group("class", (t.summaries,), (CLASS_TABLE,)),
        Group("service", (t.sli,), (SERVICE_TABLE,)),
        Group("cluster", (t.jobs,), (SCHED_TABLE,)),
    )}


def outputs(topics: Topics) -> tuple[str, ...]:
    """Every topic a task may send to, besides its changelogs and batch log."""
    t = topics
    return (t.alerts, t.summaries, t.allocations, t.sli,
            *(Topics.dlq(x) for x in (t.samples, t.events, t.metrics, t.summaries, t.inference, t.sli, t.jobs,
                                      t.allocations)))


class TaskFactory:
    """Builds a task with the real engine stages; ``counts``: each topic's partition count."""

    def __init__(self, settings: StreamsSettings, counts: Mapping[str, int]) -> None:
        self.engine, self.limits = settings.engine, Limits.of(settings)
        self.max_past_skew = float(settings.limits.max_past_skew)
        self.rules = load_rules(settings.engine.rules)
        self.topics = Topics(settings.kafka.topic_prefix)
        self.counts = counts

    def __call__(self, tid: TaskId) -> Task:
        e, t, n = self.engine, self.topics, self.counts
        lateness, skew = float(e.summary_lateness), float(e.max_source_skew)
        if tid.group == "node":
            return NodeTask(tid, t, e, self.limits, node_stage=NodeStage(self.rules, e, self.max_past_skew),
                            inference_stage=InferenceStage(e), summary_partitions=n[t.summaries],
                            sli_partitions=n[t.sli], job_partitions=n[t.jobs])
        if tid.group == "class":
            return GatedTask(tid, t, self.limits, stage=ClassStage(self.rules, e), topic=t.summaries, table=CLASS_TABLE,
                             model=TaskSummary, key_of=class_of, sources=n[t.samples], lateness=lateness, skew=skew)
        if tid.group == "service":
            return GatedTask(tid, t, self.limits, stage=ServiceStage(e), topic=t.sli, table=SERVICE_TABLE,
                             model=ServiceSli, key_of=service_of, sources=n[t.inference], lateness=lateness, skew=skew)
        if tid.group == "cluster":
            return ClusterTask(tid, t, e, self.limits, stage=SchedulerStage(e),
                               allocation_partitions=n[t.allocations])
        raise ValueError(f"no task kind {tid.group!r}")


def class_of(record: TaskSummary) -> str:
    return record.task


def service_of(record: ServiceSli) -> str:
    return record.service
