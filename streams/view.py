"""A read-only view of stage 1's state per node (``NodeStage.state``): what a display may show, copied out.

The live view of ``gpuwarden run`` draws from this, so it shows exactly what the
rules see without reaching into the engine's state (which it must never change).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuwarden.streams.columns import GPU_INDEX
from gpuwarden.streams.nodestate import NodeState


@dataclass(frozen=True, slots=True)
class GpuView:
    index: int
    latest: Mapping[str, float | None]
    """Each metric's mean over the newest closed bucket; empty before the first closes."""
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class TaskView:
    task_id: str
    labels: Mapping[str, str]
    gpus: int


@dataclass(frozen=True, slots=True)
class NodeView:
    node: str
    gpus: tuple[GpuView, ...]
    """By GPU index."""
    tasks: tuple[TaskView, ...]
    """By task id."""


def node_view(st: NodeState) -> NodeView:
    """A copy of what a display may show of one node: its GPUs' latest values, its tasks."""
    gpus = []
    for idx in sorted(st.gpus):
        g = st.gpus[idx]
        row = g.win.latest_row()
        latest = {} if row is None else {m: row[i] for m, i in GPU_INDEX.items()}
        gpus.append(GpuView(idx, latest, dict(g.labels)))
    tasks = tuple(TaskView(tid, dict(t.labels), len(t.gpus)) for tid, t in sorted(st.tasks.items()))
    return NodeView(st.node, tuple(gpus), tasks)
