"""The stream worker's metrics hooks against what the runtime hands them (lags per input partition
as aiokafka's TopicPartition, runners with dead-letter counts, the unsent log)."""

from __future__ import annotations

from types import SimpleNamespace

from aiokafka import TopicPartition as TP
from prometheus_client import generate_latest

from gpuwarden.streams.dlq import reason_label
from gpuwarden.streams.telemetry import StreamMetrics


def sample(m: StreamMetrics, name: str, **labels: str) -> float | None:
    return m.registry.get_sample_value(name, labels)


def test_lag_dead_letters_and_unsent_follow_the_runners_and_the_assignment() -> None:
    m = StreamMetrics(refresh_s=0.0)
    runner = SimpleNamespace(dead_by={("gpu.samples", "json"): 2})
    unsent = SimpleNamespace(count=1)
    m.refresh({TP("gpu.samples", 0): 10, TP("gpu.samples", 1): 0}, [runner], unsent)
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="0") == 10
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="1") == 0
    assert sample(m, "gpuwarden_streams_dead_letters_total", topic="gpu.samples", reason="json") == 2
    # Later: partition 1's task moved away, two more letters, one more refused by the broker.
    runner.dead_by[("gpu.samples", "json")] = 3
    runner.dead_by[("gpu.samples", "field")] = 1
    unsent.count = 2
    m.refresh({TP("gpu.samples", 0): 30}, [runner], unsent)
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="0") == 30
    assert sample(m, "gpuwarden_streams_consumer_lag", topic="gpu.samples", partition="1") is None
    assert sample(m, "gpuwarden_streams_dead_letters_total", topic="gpu.samples", reason="json") == 3
    assert sample(m, "gpuwarden_streams_dead_letters_total", topic="gpu.samples", reason="field") == 1
    assert sample(m, "gpuwarden_streams_unsent_total") == 2
    assert b"# TYPE gpuwarden_streams_dead_letters_total counter" in generate_latest(m.registry)


def test_transactions_and_restores_are_counted() -> None:
    m = StreamMetrics()
    m.committed()
    m.committed()
    m.transactions.labels("aborted").inc()
    m.restored(0.02, records=120, diverged=0)
    assert sample(m, "gpuwarden_streams_transactions_total", outcome="committed") == 2
    assert sample(m, "gpuwarden_streams_transactions_total", outcome="aborted") == 1
    assert (sample(m, "gpuwarden_streams_last_commit_timestamp_seconds") or 0) > 0
    assert sample(m, "gpuwarden_streams_restore_seconds_count") == 1
    assert sample(m, "gpuwarden_streams_restore_seconds_bucket", le="0.025") == 1
    assert sample(m, "gpuwarden_streams_restore_records_total") == 120
    assert sample(m, "gpuwarden_streams_replay_diverged_total") == 0


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
    m.refresh({}, [], SimpleNamespace(count=0), [SimpleNamespace(id=SimpleNamespace(group="class"), stage=stage, tables={})])
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
