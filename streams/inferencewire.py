"""The inference stages on Kafka: ``inference.metrics`` (key node) → ``inference.sli`` (key service).

The stream worker reads ``inference.metrics`` beside stage 1's inputs (the same key, node,
so the same partitions) and hands it to the inference stage's runner: its state is one
envelope per node in its own changelog table (``inference-state``), its transitions go to
``alerts``, its services' closed minutes of SLO events (``ServiceSli``) to ``inference.sli``
keyed by service, and a record that fails the contract to ``inference.metrics.dlq`` with the
reason. After each batch the runner reports how far each of its input partitions has got
(:class:`SliProgress`: a ``stage_progress/1`` record, header ``gw-progress``, to *every*
``inference.sli`` partition, behind the SLIs it covers), as stage 1 does for stage 2.

The service stage's runner reads ``inference.sli`` (table ``service-state``, key service):
a service's SLIs are released once the gate of their partition, the minimum over the
inference partitions' reports (``streams/progress.py``'s :class:`Gate`), has passed them, so
a node whose partition is reading a backlog cannot send a minute that sorts ahead of what was
applied; malformed SLIs go to ``inference.sli.dlq``. Kept out of ``topology.py`` so that file
only routes the topics here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuwarden.contract import InferenceMetrics, ServiceSli, StageProgress, Topics, encode
from gpuwarden.streams.dlq import Consumed, Limits, Outbound
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.keyed import KeyedRunner, Settle, Source
from gpuwarden.streams.progress import HEADERS, Gate, Reporter, partition_watermark, read_reports
from gpuwarden.streams.servicestage import ServiceStage

TABLE = "inference-state"
SERVICE_TABLE = "service-state"


def inference_runner(stage: InferenceStage, topics: Topics, limits: Limits, checkpoint_s: float,
                     progress: "SliProgress") -> KeyedRunner:
    """The runner of the inference stage: decoded records in, transitions to ``alerts`` and SLIs
    to ``inference.sli`` out; ``progress`` learns which nodes each input partition holds."""

    def emit(record: InferenceMetrics, msg: Consumed) -> list[Outbound]:
        progress.nodes_at.setdefault(msg.partition, set()).add(record.node)
        trs = stage.process(record)
        return [*(Outbound(topics.alerts, t.fingerprint.encode(), encode(t)) for t in trs),
                *(Outbound(topics.sli, s.service.encode(), encode(s)) for s in stage.take_slis())]

    return KeyedRunner(stage, {topics.inference: Source(InferenceMetrics, node_of, Topics.dlq(topics.inference))},
                       emit, limits, checkpoint_s)


class SliProgress:
    """The inference stage's side of the gate: per input partition the nodes read from it, and
    the progress reports due (each to every ``inference.sli`` partition)."""

    def __init__(self, stage: InferenceStage, runner_synced: Any, topic: str, partitions: int,
                 lateness: float, interval_s: float) -> None:
        self.stage, self.synced, self.topic, self.partitions = stage, runner_synced, topic, partitions
        self.lateness = lateness
        self.reporter = Reporter(interval_s)
        self.nodes_at: dict[int, set[str]] = {}

    def forget(self, kept: set[int]) -> None:
        """Partitions moved: what other partitions held is not ours now; report afresh."""
        for p in list(self.nodes_at):
            if p not in kept:
                del self.nodes_at[p]
        self.reporter.forget()

    def reports(self, partitions: Iterable[int], catching: set[int], wall: float) -> list[Outbound]:
        """The due reports of these input partitions (``catching``: those reading a backlog)."""
        sends: list[Outbound] = []
        for p in sorted(partitions):
            nodes = [n for n in sorted(self.nodes_at.get(p, ())) if self.synced(n)]
            marks = [(m, m) for n in nodes if (m := self.stage.position(n)) is not None]
            report = StageProgress(partition=p, catching_up=p in catching, nodes=len(nodes),
                                   watermark=partition_watermark(marks, p in catching, self.lateness))
            if self.reporter.due(report, wall):
                value, key = encode(report), f"progress:{p}".encode()
                sends += [Outbound(self.topic, key, value, HEADERS, s) for s in range(self.partitions)]
        return sends


class ServiceGates:
    """The service stage's side: one :class:`Gate` per ``inference.sli`` partition, and the
    partition each service was read from (to release it when its gate moves)."""

    def __init__(self, stage: ServiceStage, topics: Topics, limits: Limits, sources: int,
                 lateness: float, skew: float) -> None:
        self.stage, self.topics, self.limits = stage, topics, limits
        self.sources, self.lateness, self.skew = sources, lateness, skew
        self.gates: dict[int, Gate] = {}
        self.service_at: dict[str, int] = {}

    def forget(self, kept: set[int]) -> None:
        for p in set(self.gates) - kept:
            del self.gates[p]
        for s in [s for s, p in self.service_at.items() if p not in kept]:
            del self.service_at[s]

    def gate(self, partition: int) -> Gate:
        g = self.gates.get(partition)
        if g is None:
            g = self.gates[partition] = Gate(self.sources, self.lateness, self.skew)
        return g

    def runner(self, checkpoint_s: float) -> KeyedRunner:
        """The service stage's runner: SLIs in (under their partition's gate), transitions out."""
        def emit(sli: ServiceSli, msg: Consumed) -> list[Outbound]:
            self.service_at[sli.service] = msg.partition
            return self._alerts(self.stage.process(sli, self.gate(msg.partition).value))

        return KeyedRunner(self.stage, {self.topics.sli: Source(ServiceSli, service_of, Topics.dlq(self.topics.sli))},
                           emit, self.limits, checkpoint_s)

    def settle(self, progress: list[Any], synced: Any) -> Settle:
        """After a batch's SLIs: its progress reports move the gates on, and the services behind
        a gate that moved release what it now allows (a malformed report: to the DLQ)."""
        def run() -> tuple[list[str], list[Outbound]]:
            moved, sends = read_reports(progress, self.gate, self.limits, Topics.dlq(self.topics.sli))
            changed = [s for s, p in sorted(self.service_at.items()) if p in moved and synced(s)]
            for s in changed:
                sends += self._alerts(self.stage.release(s, self.gates[self.service_at[s]].value))
            return changed, sends
        return run

    def _alerts(self, made: list) -> list[Outbound]:
        return [Outbound(self.topics.alerts, t.fingerprint.encode(), encode(t)) for t in made]


def node_of(record: Any) -> str:
    return record.node


def service_of(record: Any) -> str:
    return record.service
