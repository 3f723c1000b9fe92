"""The node task: one partition of the node-keyed inputs (stage 1 and the inference stage).

``gpu.samples``, ``gpu.events``, ``task.metrics`` (one batch of a node's task metrics per tick,
applied item by item) and ``scheduler.allocations`` go to :class:`NodeStage`; ``inference.metrics``
to :class:`InferenceStage`. All keyed by node, so a node's inputs are on one partition index.
Stage 1 makes transitions (``alerts``, key fingerprint) and task summaries (``task.summaries``,
key task class: stage 2's repartition); the inference stage makes transitions and its services'
closed minutes of SLO events (``inference.sli``, key service). Progress reports follow, to every
partition of those topics (:mod:`gpuwarden.streams.progress`): how far this partition has got.

Event-time order across the inputs: a batch's stage-1 records are merged by Kafka timestamp (the
order agents sent them), and a node's watermark is held back while one of its inputs still has
records on the broker (:mod:`gpuwarden.streams.backlog`, docs/streams-kafka.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from operator import attrgetter
from typing import Any

from gpuwarden.contract import GpuEvent, InferenceMetrics, JobAllocation, NodeSnapshot, StageProgress, TaskMetrics, \
    Topics, encode
from gpuwarden.streams.backlog import Backlog
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.dlq import Consumed, Limits, Outbound, salvage_inbound
from gpuwarden.streams.engine import StageOutput
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.keyed import KeyedRunner, Source
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.progress import Gate, Reporter, is_progress, partition_watermark, read_reports
from gpuwarden.streams.statewire import INFERENCE_TABLE, NODE_TABLE
from gpuwarden.streams.task import Batch, Record, Task, TaskId, report


class NodeTask(Task):
    """Stage 1 and the inference stage on one partition index of the node-keyed inputs."""

    def __init__(self, tid: TaskId, topics: Topics, engine: EngineConfig, limits: Limits, *,
                 node_stage: NodeStage, inference_stage: InferenceStage, summary_partitions: int,
                 sli_partitions: int, job_partitions: int) -> None:
        self.topics = t = topics
        self.p = tid.partition
        self.node_stage, self.inference_stage = node_stage, inference_stage
        self.limits = limits
        self.summary_partitions, self.sli_partitions = summary_partitions, sli_partitions
        self.lateness = float(engine.summary_lateness)
        self.ranks = {t.samples: 0, t.events: 1, t.metrics: 2}
        #: stage 1's inputs in the order a batch merges them; allocations are never behind (they come
        #: through the scheduler stage; one behind the samples applies on arrival)
        self.node_inputs = (t.samples, t.events, t.metrics, t.allocations)
        self.backlog = Backlog(self.ranks)
        #: the scheduler stage's watermark, read on this partition of ``scheduler.allocations``
        self.gate = node_stage.gate = Gate(job_partitions, self.lateness, float(engine.max_source_skew))
        self.nodes: set[str] = set()  # nodes read here (not those known only from their allocations)
        self.served: set[str] = set()  # nodes read on inference.metrics
        self.reporter = Reporter(float(engine.summary_interval))
        self.sli_reporter = Reporter(float(engine.summary_interval))
        self.scratch = StageOutput([], [])  # one per task: a new one per record cost ~4 % of a worker's CPU
        node = KeyedRunner(node_stage, {
            t.samples: Source(NodeSnapshot, node_of, Topics.dlq(t.samples)),
            t.events: Source(GpuEvent, node_of, Topics.dlq(t.events)),
            t.metrics: Source(TaskMetrics, node_of, Topics.dlq(t.metrics),  # batches (one per tick)
                              unpack=TaskMetrics.unpack, salvage=salvage_inbound),
            t.allocations: Source(JobAllocation, node_of, Topics.dlq(t.allocations)),
        }, self._emit_node, limits)
        inference = KeyedRunner(inference_stage, {
            t.inference: Source(InferenceMetrics, node_of, Topics.dlq(t.inference))}, self._emit_inference, limits)
        super().__init__(tid, (*self.node_inputs, t.inference), {NODE_TABLE: node, INFERENCE_TABLE: inference})

    def apply(self, batch: Batch) -> list[Outbound]:
        """Stage 1's records merged by Kafka timestamp (with an empty batch: the settle step
        alone), then the inference stage's, in offset order (it reorders them itself)."""
        self.beyond = batch.beyond
        records = batch.records
        lists = [records[t] for t in self.node_inputs if records.get(t)]
        out: list[Outbound] = []
        inference = records.get(self.topics.inference)
        if lists or not inference:
            out += self._stage1(lists, batch)
        if inference:
            out += self.tables[INFERENCE_TABLE].run(inference, batch.now).out
        return out

    def _stage1(self, lists: list[Sequence[Record]], batch: Batch) -> list[Outbound]:
        last = {(r.topic, self.p, r.key): r.offset for recs in lists if recs[0].topic in self.ranks for r in recs}
        self.backlog.start(last, {self.p: {self.ranks[t] for t in batch.beyond if t in self.ranks}})
        merged: Iterable[Record] = lists[0] if len(lists) == 1 else heapq.merge(*lists, key=attrgetter("timestamp"))
        allocations = self.topics.allocations
        records, reports = [], []  # the scheduler stage's progress reports: read by the settle step
        for m in merged:
            (reports if m.topic == allocations and is_progress(m.headers) else records).append(m)
        return self.tables[NODE_TABLE].run(records, batch.now, settle=lambda: self._settle(reports)).out

    def holding(self) -> bool:
        return bool(self.nodes) and bool(self.backlog.behind_at_end(self.p))

    def _emit_node(self, record: Any, msg: Consumed) -> list[Outbound]:
        scratch = self.scratch
        try:
            behind = self.backlog.behind(msg.topic, msg.partition, msg.offset, msg.key)
            self.node_stage.process(record, behind, scratch)
            if type(record) is not JobAllocation:  # a node known only from its allocations makes no summaries
                self.nodes.add(record.node)
            return self._node_outbound(scratch)
        finally:
            scratch.transitions.clear()
            scratch.summaries.clear()

    def _node_outbound(self, out: StageOutput) -> list[Outbound]:
        if not out.transitions and not out.summaries:
            return []
        t = self.topics
        return [*(Outbound(t.alerts, x.fingerprint.encode(), encode(x)) for x in out.transitions),
                *(Outbound(t.summaries, s.task.encode(), encode(s)) for s in out.summaries)]

    def _settle(self, reports: list[Any]) -> tuple[list[str], list[Outbound]]:
        """After stage 1's records: the scheduler's progress reports move the allocation gate on
        (a malformed one is dead-lettered), and every node releases what its inputs' final state
        allows (a node held back by an input behind at its last record would otherwise wait for
        its next record: forever at the end of a replayed topic) and judges the allocation
        instants the gate allows."""
        _, sends = read_reports(reports, lambda _p: self.gate, self.limits)
        out, behind, changed = StageOutput([], []), self.backlog.behind_at_end(self.p), []
        for node in sorted(self.nodes):
            if self.node_stage.advance(node, behind, out):
                changed.append(node)
        return changed, sends + self._node_outbound(out)

    def _emit_inference(self, record: InferenceMetrics, msg: Consumed) -> list[Outbound]:
        self.served.add(record.node)
        t, trs = self.topics, self.inference_stage.process(record)
        return [*(Outbound(t.alerts, x.fingerprint.encode(), encode(x)) for x in trs),
                *(Outbound(t.sli, s.service.encode(), encode(s)) for s in self.inference_stage.take_slis())]

    def reports(self, wall: float) -> list[Outbound]:
        """Stage 1's progress to every ``task.summaries`` partition and the inference stage's to
        every ``inference.sli`` partition, each when it changed or every ``resend_s``."""
        p, t = self.p, self.topics
        marks = [m for n in sorted(self.nodes) if (m := self.node_stage.position(n))]
        catching = bool(self.backlog.behind_at_end(p))
        out = report(self.reporter, wall, t.summaries, self.summary_partitions, StageProgress(
            partition=p, catching_up=catching, nodes=len(marks),
            watermark=partition_watermark(marks, catching, self.lateness)))
        served = [(m, m) for n in sorted(self.served) if (m := self.inference_stage.position(n)) is not None]
        catching = t.inference in self.beyond
        return out + report(self.sli_reporter, wall, t.sli, self.sli_partitions, StageProgress(
            partition=p, catching_up=catching, nodes=len(self.served),
            watermark=partition_watermark(served, catching, self.lateness)))

    def dump(self) -> dict[str, Any]:
        return {**super().dump(), "nodes": sorted(self.nodes), "served": sorted(self.served),
                "gate": self.gate.dump(), "behind": sorted(self.backlog.behind_at_end(self.p))}

    def load(self, data: Any) -> None:
        super().load(data)
        self.nodes, self.served = set(data["nodes"]), set(data["served"])
        self.gate.load(data["gate"])
        self.backlog.start({}, {self.p: data["behind"]})


def node_of(record: Any) -> str:
    return record.node  # type: ignore[no-any-return]
