"""The inference stage on Kafka: ``inference.metrics`` (key node) through a keyed runner.

The stream worker reads ``inference.metrics`` beside stage 1's inputs (the same key, node,
so the same partitions) and hands it to this runner alone: the stage's state is one
envelope per node in its own changelog table (``inference-state``), its transitions go to
``alerts``, and a record that fails the contract goes to ``inference.metrics.dlq`` with the
reason. Kept out of ``topology.py`` so that file only routes the topic here.
"""

from __future__ import annotations

from typing import Any

from gpuwarden.contract import InferenceMetrics, Topics, encode
from gpuwarden.streams.dlq import Consumed, Limits, Outbound
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.keyed import KeyedRunner, Source

TABLE = "inference-state"


def inference_runner(stage: InferenceStage, topics: Topics, limits: Limits, checkpoint_s: float) -> KeyedRunner:
    """The runner of the inference stage: decoded records in, transitions to ``alerts`` out."""

    def node_of(record: Any) -> str:
        return record.node

    def emit(record: InferenceMetrics, msg: Consumed) -> list[Outbound]:
        return [Outbound(topics.alerts, t.fingerprint.encode(), encode(t)) for t in stage.process(record)]

    return KeyedRunner(stage, {topics.inference: Source(InferenceMetrics, node_of, Topics.dlq(topics.inference))},
                       emit, limits, checkpoint_s)
