"""A tiny keyed stage pair with the engine's interface, for testing the plumbing on its own.

It is deliberately simple so a test can predict its output exactly: an XID
event fires an alert per (node, code); every snapshot counts towards a task
summary every ``every`` snapshots; the class stage fires once a class has
seen ``after`` summaries.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from gpuwarden.contract import AlertState, AlertTransition, GpuEvent, NodeSnapshot, TaskSummary, Tier


@dataclass
class Output:
    transitions: list[AlertTransition] = field(default_factory=list)
    summaries: list[TaskSummary] = field(default_factory=list)


def _alert(fp: str, rule: str, ts: float) -> AlertTransition:
    return AlertTransition(fingerprint=fp, rule=rule, tier=Tier.ATTENTION, state=AlertState.FIRING,
                           started_at=ts, ts=ts, summary=rule)


class StandinNodeStage:
    def __init__(self, every: int = 5) -> None:
        self.every = every
        self.state: dict[str, dict] = {}

    def process(self, record: object, behind: frozenset = frozenset(), out: Output | None = None) -> Output:
        """Outputs are appended to ``out`` (a new one when None), as ``NodeStage.process`` does."""
        st = self.state.setdefault(record.node, {"snapshots": 0, "seen": []})
        out = Output() if out is None else out
        if isinstance(record, NodeSnapshot):
            st["snapshots"] += 1
            if st["snapshots"] % self.every == 0:
                out.summaries.append(TaskSummary(task="cls", task_id=record.node, node=record.node,
                                                 window_s=60, samples=st["snapshots"], gpus=len(record.gpus),
                                                 ts=record.ts))
        elif isinstance(record, GpuEvent) and record.code not in st["seen"]:
            st["seen"].append(record.code)
            out.transitions.append(_alert(f"{record.node}:xid{record.code}", "xid", record.ts))
        return out

    def advance(self, node: str, behind: object, out: object) -> bool:
        return False  # no reorder buffer: every record is applied as it comes

    def position(self, node: str) -> tuple[float, float] | None:
        return None  # no reorder buffer: nothing held back

    def dump(self, node: str) -> bytes:
        return json.dumps(self.state[node]).encode()

    def load(self, node: str, data: bytes) -> None:
        self.state[node] = json.loads(data)

    def drop(self, node: str) -> None:
        self.state.pop(node, None)

    def allocations(self) -> list:  # what the worker's metrics read (streams/stageseries.py)
        return []  # no scheduler join


class StandinClassStage:
    def __init__(self, after: int = 3) -> None:
        self.after = after
        self.counts: dict[str, int] = {}

    def process(self, summary: TaskSummary, gate: float = float("inf")) -> list[AlertTransition]:
        n = self.counts[summary.task] = self.counts.get(summary.task, 0) + 1
        return [_alert(f"class:{summary.task}", "class", summary.ts)] if n == self.after else []

    def release(self, task_class: str, gate: float) -> list[AlertTransition]:
        return []  # applies each summary as it comes

    def dump(self, task_class: str) -> bytes:
        return str(self.counts[task_class]).encode()

    def load(self, task_class: str, data: bytes) -> None:
        self.counts[task_class] = int(data)

    def drop(self, task_class: str) -> None:
        self.counts.pop(task_class, None)

    def classes(self) -> list[str]:  # what the worker's metrics read (streams/telemetry.py)
        return sorted(self.counts)

    def baseline(self, task_class: str) -> dict[str, object]:
        return {}

    def latest(self, task_class: str) -> dict[str, float]:
        return {}
