"""The stream worker's metrics hooks against stand-ins of what the topology hands them (a consumer
with an assignment and high-water marks, runners with positions and dead-letter counts)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

from prometheus_client import generate_latest

from gpuwarden.streams.dlq import reason_label
from gpuwarden.streams.telemetry import StreamMetrics

class TP(NamedTuple):  # faust's TP: (topic, partition)
    topic: str
    partition: int


class Consumer:
    def __init__(self, highs: dict[tuple[str, int], int]) -> None:
        self.highs = highs

    def assignment(self) -> set:
        return {TP(topic=t, partition=p) for t, p in self.highs}

    def highwater(self, tp) -> int | None:  # noqa: ANN001 - faust Consumer.highwater's shape
        return self.highs.get((tp.topic, tp.partition))


def sample(m: StreamMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_lag_dead_letters_and_unsent_follow_the_runners_and_the_assignment() -> None:
    m = StreamMetrics(refresh_s=0.0)
    runner = SimpleNamespace(sources={"gpu.samples": None}, position={"gpu.samples:0": 90, "gpu.samples:1": 10},
                             dead_by={("gpu.samples", "json"): 2})
    unsent = SimpleNamespace(count=1)
    m.refresh(Consumer({("gpu.samples", 0): 100, ("gpu.samples", 1): 10, ("changelog", 0): 5}), [runner], unsent)
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="0") == 10
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="1") == 0
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="changelog", partition="0") is None  # not an input
    assert sample(m, "gpuwarden_streams_dead_letters_total", topic="gpu.samples", reason="json") == 2
    # Later: partition 1 revoked, two more letters, one more refused by the broker.
    runner.dead_by[("gpu.samples", "json")] = 3
    runner.dead_by[("gpu.samples", "field")] = 1
    unsent.count = 2
    m.refresh(Consumer({("gpu.samples", 0): 120}), [runner], unsent)
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="0") == 30
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="1") is None
    assert sample(m, "gpuwarden_streams_dead_letters_total", topic="gpu.samples", reason="json") == 3
    assert sample(m, "gpuwarden_streams_dead_letters_total", topic="gpu.samples", reason="field") == 1
    assert sample(m, "gpuwarden_streams_unsent_total") == 2
    assert b"# TYPE gpuwarden_streams_dead_letters_total counter" in generate_latest(m.registry)


def test_checkpoints_record_time_state_size_and_keys() -> None:
    m = StreamMetrics()
    m.checkpointed("node-state", {"a": 100, "b": 50}, 0.02)
    assert sample(m, "gpuwarden_streams_state_bytes", table="node-state") == 150
    assert sample(m, "gpuwarden_streams_state_keys", table="node-state") == 2
    assert sample(m, "gpuwarden_streams_checkpoint_seconds_count", table="node-state") == 1
    assert sample(m, "gpuwarden_streams_checkpoint_seconds_bucket", table="node-state", le="0.025") == 1


def test_dead_letter_reasons_are_a_bounded_set() -> None:
    assert reason_label("<record>: Invalid JSON: expected value at line 1 column 1") == "json"
    assert reason_label("gpus.util_gpu[0]: Input should be a finite number") == "field"
    assert reason_label("record: 9000000 bytes exceeds the limit of 1048576 bytes") == "record"
    assert reason_label("schema: 'node_snapshot/9' is a version this reader does not know") == "schema"
    assert reason_label("key: record key 'b' does not match 'a'") == "key"
    assert reason_label("engine: KeyError: 'x'") == "engine"


def test_task_classes_against_their_baselines_from_a_real_class_stage() -> None:
    from gpuwarden.app.settings import validate_settings
    from gpuwarden.contract import TaskSummary
    from gpuwarden.streams.classstage import ClassStage
    from gpuwarden.streams.rules import load_rules

    engine = validate_settings({"engine": {"observation_period": "10s", "baseline_min_samples": 3,
                                           "baseline_refresh": "1s", "summary_interval": "5s"}}).engine
    stage = ClassStage(load_rules(None), engine)
    for i in range(12):
        for task_id, util in (("t1", 60.0 + i % 3), ("t2", 62.0)):
            stage.process(TaskSummary(task="llm-pretrain", task_id=task_id, node="n1", ts=1_000 + 5 * i,
                                      window_s=5.0, samples=5, gpus=1, stats={"util_gpu": util}))
    stage.process(TaskSummary(task="fresh", task_id="t3", node="n1", ts=1_055, window_s=5.0, samples=5, gpus=1,
                              stats={"util_gpu": 10.0}))
    m = StreamMetrics(refresh_s=0.0, classes_s=0.0)
    m.refresh(Consumer({}), [], SimpleNamespace(count=0), stage)
    band = stage.baseline("llm-pretrain")["util_gpu"]
    assert band is not None
    assert sample(m, "gpuwarden_streams_class_baseline", task_class="llm-pretrain", statistic="util_gpu",
                  bound="median") == band.median
    assert sample(m, "gpuwarden_streams_class_baseline", task_class="llm-pretrain", statistic="util_gpu",
                  bound="high") == band.high
    assert sample(m, "gpuwarden_streams_class_value", task_class="llm-pretrain", statistic="util_gpu") == \
        stage.latest("llm-pretrain")["util_gpu"]
    assert sample(m, "gpuwarden_streams_classes", state="learning") == 1  # "fresh": one summary
    assert sample(m, "gpuwarden_streams_classes", state="baselined") == 1
    assert sample(m, "gpuwarden_streams_class_baseline", task_class="fresh", statistic="util_gpu",
                  bound="median") is None
