"""The inference stage in a real `gpuwarden streams` worker on real Kafka: records of
``inference.metrics`` (key node) give transitions on ``alerts``, the stage's state goes to its
own changelog table (at a snapshot: here the clean stop's), and a malformed record goes to ``inference.metrics.dlq`` with the reason."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gpuwarden.contract import CounterDelta, InferenceMetrics, Topics, encode
from gpuwarden.streams.statewire import app_id
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


async def test_inference_records_alert_snapshot_and_dead_letter(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, partitions=2, slo={"chat": {"error_rate": "1%"}})
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.inference, topics.sli):  # as deployed (docs)
        await create_topic(kafka_bootstrap, t, partitions=2)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    t0 = time.time() - 3 * 3600
    t0 -= t0 % 60
    good = [encode(_minute(t0, n, 300.0 if n >= 30 else 0.0)) for n in range(40)]
    bad = json.dumps({**json.loads(good[0]), "start_ts": t0 + 10_000}).encode()  # starts after it ends
    with workers(config, tmp_path, "w1") as (w1,):
        await produce(kafka_bootstrap, topics.inference, [(b"gn7", v) for v in [*good[:20], bad, *good[20:]]])
        letters = await consume_all(kafka_bootstrap, Topics.dlq(topics.inference), expected=1)
        alerts = await consume_all(kafka_bootstrap, topics.alerts, expected=1)
        assert w1.alive(), w1.tail()
    # A clean stop snapshots what changed since the last snapshot (the task's first, at its start).
    changelog = f"{app_id(settings)}-inference-state-changelog"
    assert any(r.key == b"gn7" for r in await read_to_end(kafka_bootstrap, changelog, 2))
    letter = json.loads(letters[0].value)
    assert letter["topic"] == topics.inference and "start_ts" in letter["error"]
    rules = {json.loads(a.value)["rule"] for a in alerts}
    assert "inference-failures" in rules


def _replica(t0: float, node: str, n: int, failed: float) -> InferenceMetrics:
    return _minute(t0, n, failed).model_copy(update={"node": node, "boot_id": f"b-{node}"})


async def test_two_nodes_replicas_of_one_service_give_the_engines_one_service_level_alert(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """``chat`` on gn7 and gn8: gn8 fails every request from minute 30, so the service burns at
    50x (600 of 1,200 a minute against 1 %; the 1 h window, 30 good minutes before, passes 14.4x
    at the 13th bad minute). The two nodes' inference stages send their
    minutes to ``inference.sli``; the service stage, gated by their partitions' progress, pages
    once for the service, with the transitions the one-process Engine gives. A malformed SLI goes
    to ``inference.sli.dlq``."""
    from gpuwarden.streams.config import EngineConfig
    from gpuwarden.streams.engine import Engine

    slo = {"chat": {"error_rate": "1%"}}
    settings = settings_for(kafka_bootstrap, partitions=2, slo=slo)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.inference, topics.sli, topics.alerts):
        await create_topic(kafka_bootstrap, t, partitions=2)
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    t0 = time.time() - 3 * 3600
    t0 -= t0 % 60
    recs = [_replica(t0, node, n, 600.0 if node == "gn8" and n >= 30 else 0.0)
            for n in range(50) for node in ("gn7", "gn8")]
    engine = Engine(config=EngineConfig.model_validate({"slo": slo}))
    want = [encode(t) for r in recs for t in engine.process(r) if t.rule.startswith("slo-")]
    assert [json.loads(w)["rule"] for w in want] == ["slo-steady-burn", "slo-over-target", "slo-slow-burn",
                                                           "slo-fast-burn"]
    with workers(config, tmp_path, "w1") as (w1,):
        await produce(kafka_bootstrap, topics.inference, [(r.node.encode(), encode(r)) for r in recs])
        await produce(kafka_bootstrap, topics.sli, [(b"chat", b'{"schema": "service_sli/1", "ts": 1}')])
        letters = await consume_all(kafka_bootstrap, Topics.dlq(topics.sli), expected=1)
        alerts: list = []

        async def all_slo() -> bool:
            nonlocal alerts
            alerts = await read_to_end(kafka_bootstrap, topics.alerts, 2)
            return sum(1 for a in alerts if json.loads(a.value)["rule"].startswith("slo-")) >= len(want)

        await wait_for(all_slo, "the service stage's SLO alerts")
        assert w1.alive(), w1.tail()
    got = {a.value for a in alerts if json.loads(a.value)["rule"].startswith("slo-")}  # consumers dedup
    assert got == set(want)
    fast = json.loads(next(w for w in want if b"slo-fast-burn" in w))
    assert "node" not in fast["labels"] and fast["labels"]["worst_node"] == "gn8"
    assert fast["evidence"]["values"]["nodes"] == 2
    assert "service: Field required" in json.loads(letters[0].value)["error"]
