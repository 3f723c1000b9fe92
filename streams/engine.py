"""The pure engine: the stages wired in one process (standalone run, replay, tests).

Records in, alert transitions out; event time only, so the same records in the
same order give byte-identical transitions whether live or replayed. The Kafka
workers run :class:`NodeStage` and :class:`ClassStage` on separate partitions
with the summaries in between on a topic, and :class:`SchedulerStage` (key cluster) on
``scheduler.jobs``, its job allocations going to stage 1 on ``scheduler.allocations``, and the
inference stage (key node) on ``inference.metrics``, its services' minutes of SLO events going to
the :class:`ServiceStage` (key service) on ``inference.sli``, which judges the fleet's burn rates.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from gpuwarden.contract import DEFAULT_MAX_PAST_SKEW_S, AlertTransition, InferenceMetrics, NodeCapacity, \
    SchedulerJob, SchedulerPoll, TaskSummary
from gpuwarden.streams.alerts import transition
from gpuwarden.streams.classstage import ClassStage
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.output import StageOutput
from gpuwarden.streams.rules import RulePack, load_rules
from gpuwarden.streams.schedstage import SchedulerStage
from gpuwarden.streams.servicestage import ServiceStage

__all__ = ["ClassStage", "Engine", "InferenceStage", "NodeStage", "SchedulerStage", "ServiceStage", "StageOutput"]
_SCHEDULER = (SchedulerJob, NodeCapacity, SchedulerPoll)


class Engine:
    """Both stages in one process (standalone run, replay, tests): records in, transitions out.
    Inference records go to the inference stage (keyed by node, beside stage 1), scheduler
    records to the scheduler stage (key cluster), whose job allocations go through stage 1; the
    inference stage's SLO events go to the service stage, gated by the inference stage's watermark."""

    def __init__(self, rules: RulePack | None = None, config: EngineConfig | None = None,
                 max_past_skew: float = DEFAULT_MAX_PAST_SKEW_S) -> None:
        self.config = config or EngineConfig()
        self.rules = rules or load_rules(self.config.rules)
        self.nodes = NodeStage(self.rules, self.config, max_past_skew)
        self.classes = ClassStage(self.rules, self.config)
        self.inference = InferenceStage(self.config)
        self.services = ServiceStage(self.config)
        self.scheduler = SchedulerStage(self.config)
        self.summaries = 0

    def _stage2(self, out: StageOutput) -> list[AlertTransition]:
        trs = out.transitions
        for s in out.summaries:
            trs.extend(self.classes.process(s))
        self.summaries += len(out.summaries)
        return trs

    def _inference(self, trs: list[AlertTransition], gate: float | None = None) -> list[AlertTransition]:
        """The inference stage's transitions, then the service stage's on its new SLO events,
        gated as the Kafka topology gates it: by the inference stage's watermark over its nodes
        (:meth:`InferenceStage.watermark`)."""
        slis = self.inference.take_slis()
        if not slis:
            return trs
        if gate is None:
            gate = self.inference.watermark()
        for sli in slis:
            trs.extend(self.services.process(sli, gate))
        for service in self.services.services():
            trs.extend(self.services.release(service, gate))
        return trs

    def _scheduler(self, record: Any) -> list[AlertTransition]:
        """A scheduler record; the allocations it yields go through stage 1 (the join)."""
        trs, allocs = self.scheduler.process(record)
        for a in allocs:
            trs.extend(self._stage2(self.nodes.process(a)))
        return trs

    def process(self, record: Any) -> list[AlertTransition]:
        if isinstance(record, TaskSummary):
            return self.classes.process(record)
        if isinstance(record, InferenceMetrics):
            return self._inference(self.inference.process(record))
        if isinstance(record, _SCHEDULER):
            return self._scheduler(record)
        return self._stage2(self.nodes.process(record))

    def process_many(self, records: Iterable[Any]) -> list[AlertTransition]:
        """Same output as ``process`` per record, with one StageOutput for the whole run."""
        out = StageOutput([], [])
        trs, sums, nodes = out.transitions, out.summaries, self.nodes.process
        for r in records:
            if isinstance(r, TaskSummary):
                trs.extend(self.classes.process(r))
                continue
            if isinstance(r, InferenceMetrics):
                trs.extend(self._inference(self.inference.process(r)))
                continue
            if isinstance(r, _SCHEDULER):
                trs.extend(self._scheduler(r))
                continue
            nodes(r, out=out)
            if sums:
                for s in sums:
                    trs.extend(self.classes.process(s))
                self.summaries += len(sums)
                sums.clear()
        return trs

    def flush(self) -> list[AlertTransition]:
        """End of a finite input: release the reorder buffers, stage 1's first (its summaries
        go through stage 2), then stage 2's (see NodeStage, ClassStage); the inference stage's,
        its last SLO events through the service stage, then the service stage's."""
        return (self._stage2(self.nodes.flush()) + self.classes.flush()
                + self._inference(self.inference.flush(), math.inf) + self.services.flush())

    def dump_all(self) -> bytes:
        state = {"nodes": {n: self.nodes.dump(n).decode() for n in self.nodes.nodes()},
                 "classes": {c: self.classes.dump(c).decode() for c in self.classes.classes()},
                 "inference": {n: self.inference.dump(n).decode() for n in self.inference.nodes()},
                 "services": {n: self.services.dump(n).decode() for n in self.services.services()},
                 "clusters": {c: self.scheduler.dump(c).decode() for c in self.scheduler.clusters()}}
        return json.dumps(state, sort_keys=True, separators=(",", ":")).encode()

    def load_all(self, data: bytes) -> None:
        state = json.loads(data)
        for n, v in state["nodes"].items():
            self.nodes.load(n, v.encode())
        for c, v in state["classes"].items():
            self.classes.load(c, v.encode())
        for n, v in state.get("inference", {}).items():  # saved before the inference stage: none
            self.inference.load(n, v.encode())
        for c, v in state.get("clusters", {}).items():  # saved before the scheduler stage: none
            self.scheduler.load(c, v.encode())
        for n, v in state.get("services", {}).items():  # saved before the service stage: none
            self.services.load(n, v.encode())

    def open_alerts(self) -> list[AlertTransition]:
        """Every firing alert as its firing transition (for the live view and restarts)."""
        slots = (self.nodes.open_slots() + self.classes.open_slots() + self.inference.open_slots()
                 + self.services.open_slots() + self.scheduler.open_slots())
        return [transition(s.rule, fp, s, "firing", s.firing_since, s.firing_since) for fp, s in slots]

    def counters(self) -> dict[str, int]:
        """Stage 1's ``late``, ``duplicates`` and ``implausible`` records, summaries, stage 2's
        ``summaries_late``, the scheduler stage's late and incomplete polls."""
        sched = self.scheduler.counters() if self.scheduler.clusters() else {}
        return {**self.nodes.counters(), "summaries": self.summaries,
                "summaries_late": self.classes.counters()["late"], **self.inference.counters(),
                **self.services.counters(), **sched}
