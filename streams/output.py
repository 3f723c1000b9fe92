"""What a stage-1 record produces (``StageOutput``): its own module so the stages and the
engine that wires them import it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from gpuwarden.contract import AlertTransition, TaskSummary


@dataclass
class StageOutput:
    transitions: list[AlertTransition]
    summaries: list[TaskSummary]  # stage-1 per-window task summaries for stage 2
