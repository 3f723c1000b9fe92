"""The inference stage in a real `gpuwarden streams` worker on real Kafka: records of
``inference.metrics`` (key node) give transitions on ``alerts``, the stage's state goes to its
own changelog table, and a malformed record goes to ``inference.metrics.dlq`` with the reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuwarden.contract import CounterDelta, InferenceMetrics, Topics, encode
from gpuwarden.streams.topology import app_id
from tests.kafka_support import consume_all, create_topic, produce
from tests.streams_kafka.records import settings_for
from tests.streams_kafka.workers import read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka


def _minute(t0: float, n: int, failed: float) -> InferenceMetrics:
    ts = t0 + 60 * n + 30
    return InferenceMetrics(
        ts=ts, start_ts=ts - 60, node="gn7", seq=n, boot_id="b1", engine="vllm", service="chat", model="m",
        url="http://127.0.0.1:8000/metrics",
        counters=[CounterDelta(name="requests", metric="vllm:request_success", delta=600.0 - failed),
                  CounterDelta(name="requests_failed", metric="vllm:request_success", delta=failed)])


async def test_inference_records_alert_checkpoint_and_dead_letter(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, partitions=2, slo={"chat": {"error_rate": "1%"}})
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.inference):
        await create_topic(kafka_bootstrap, t, partitions=2)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    t0 = time.time() - 3 * 3600
    t0 -= t0 % 60
    good = [encode(_minute(t0, n, 300.0 if n >= 30 else 0.0)) for n in range(40)]
    bad = json.dumps({**json.loads(good[0]), "start_ts": t0 + 10_000}).encode()  # starts after it ends
    with workers(config, tmp_path, "w1") as (w1,):
        await produce(kafka_bootstrap, topics.inference, [(b"gn7", v) for v in [*good[:20], bad, *good[20:]]])
        letters = await consume_all(kafka_bootstrap, Topics.dlq(topics.inference), expected=1, timeout=90)
        alerts = await consume_all(kafka_bootstrap, topics.alerts, expected=1, timeout=90)
        changelog = f"{app_id(settings)}-inference-state-changelog"

        async def checkpointed() -> bool:
            return any(r.key == b"gn7" for r in await read_to_end(kafka_bootstrap, changelog, 2))

        await wait_for(checkpointed, 60, "the inference stage's state in its changelog")
        assert w1.alive(), w1.tail()
    letter = json.loads(letters[0].value)
    assert letter["topic"] == topics.inference and "start_ts" in letter["error"]
    rules = {json.loads(a.value)["rule"] for a in alerts}
    assert "inference-failures" in rules
