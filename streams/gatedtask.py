"""The gated tasks: stage 2 (key task class, on ``task.summaries``) and the service stage (key
service, on ``inference.sli``).

Each reads records made by other tasks' partitions plus those partitions' progress reports
(Kafka header ``gw-progress``), and releases a key's records in content order only once the
:class:`gpuwarden.streams.progress.Gate` of its partition (the minimum over every producing
partition's reports) has passed them: a producer partition that is catching up cannot send a
record that sorts ahead of what was applied. Transitions go to ``alerts``; a malformed record or
report to ``<topic>.dlq`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from gpuwarden.contract import AlertTransition, Topics, encode
from gpuwarden.streams.dlq import Consumed, Limits, Outbound
from gpuwarden.streams.keyed import KeyedRunner, Source
from gpuwarden.streams.progress import Gate, is_progress, read_reports
from gpuwarden.streams.task import Batch, Task, TaskId


class GatedStage(Protocol):
    """``ClassStage`` and ``ServiceStage``: records held per key until a gate passes them."""

    def process(self, record: Any, gate: float, /) -> list[AlertTransition]: ...
    def release(self, key: str, gate: float, /) -> list[AlertTransition]: ...
    def dump(self, key: str, /) -> bytes: ...
    def load(self, key: str, data: bytes, /) -> None: ...
    def drop(self, key: str, /) -> None: ...


class GatedTask(Task):
    """One partition of ``topic``: its records through ``stage`` under the partition's gate over
    ``sources`` producing partitions (``lateness`` and ``skew``: the gate's bounds)."""

    def __init__(self, tid: TaskId, topics: Topics, limits: Limits, *, stage: GatedStage, topic: str, table: str,
                 model: Any, key_of: Callable[[Any], str], sources: int, lateness: float, skew: float) -> None:
        self.stage, self.topic, self.alerts, self.limits = stage, topic, topics.alerts, limits
        self.gate = Gate(sources, lateness, skew)
        self.held: set[str] = set()  # the keys read here
        self.key_of = key_of
        runner = KeyedRunner(stage, {topic: Source(model, key_of, Topics.dlq(topic))}, self._emit, limits)
        super().__init__(tid, (topic,), {table: runner})
        self.runner = runner

    def apply(self, batch: Batch) -> list[Outbound]:
        """The batch's records judged against the gate as it stood before it; then its progress
        reports move the gate on, and the keys behind it release what it now allows."""
        self.beyond = batch.beyond
        records, reports = [], []
        for m in batch.records.get(self.topic, ()):
            (reports if is_progress(m.headers) else records).append(m)
        return self.runner.run(records, batch.now, settle=lambda: self._open(reports)).out

    def _emit(self, record: Any, msg: Consumed) -> list[Outbound]:
        self.held.add(self.key_of(record))
        return self._alerts(self.stage.process(record, self.gate.value))

    def _open(self, reports: Sequence[Any]) -> tuple[list[str], list[Outbound]]:
        moved, sends = read_reports(reports, lambda _p: self.gate, self.limits)
        changed = sorted(self.held) if moved else []
        for key in changed:
            sends += self._alerts(self.stage.release(key, self.gate.value))
        return changed, sends

    def _alerts(self, made: list[AlertTransition]) -> list[Outbound]:
        return [Outbound(self.alerts, t.fingerprint.encode(), encode(t)) for t in made]

    def dump(self) -> dict[str, Any]:
        return {**super().dump(), "held": sorted(self.held), "gate": self.gate.dump()}

    def load(self, data: Any) -> None:
        super().load(data)
        self.held = set(data["held"])
        self.gate.load(data["gate"])
