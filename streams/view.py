"""A read-only view of stage 1's state per node: what a display may show, copied out.

The live view of ``gpuwarden run`` draws from this, so it shows exactly what the
rules see without reaching into the engine's state (which it must never change).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


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
