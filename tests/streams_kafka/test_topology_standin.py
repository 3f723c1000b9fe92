"""The faust topology's plumbing on real Kafka, with stand-in stages whose output is known exactly."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gpuwarden.contract import Topics
from gpuwarden.streams.topology import Topology
from tests.kafka_support import consume_all, create_topic, produce
from tests.streams_kafka.records import T0, keyed, settings_for, snapshot, transition_ids, xid
from tests.streams_kafka.standin import StandinClassStage, StandinNodeStage
from tests.streams_kafka.workers import read_summaries, wait_for

pytestmark = pytest.mark.kafka


async def test_two_stages_alerts_summaries_and_dead_letters(kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.alerts):
        await create_topic(kafka_bootstrap, t, partitions=2)
    nodes = [f"n{i}" for i in range(4)]
    snaps = [snapshot(n, s, T0 + 10 * s) for s in range(10) for n in nodes]
    events = [xid(n, 100, T0 + 5, 79) for n in nodes] + [xid("n0", 101, T0 + 6, 79), xid("n0", 102, T0 + 7, 48)]
    bad = [(b"n1", b"not json"), (b"n2", keyed([snapshot("n3", 0, T0)])[0][1])]  # garbage; wrong key
    app = Topology(settings, worker_id="w1", data_dir=tmp_path,
                   node_stage=StandinNodeStage(every=5), class_stage=StandinClassStage(after=3)).app
    try:
        await asyncio.wait_for(app.start(), timeout=60)
        await produce(kafka_bootstrap, topics.samples, keyed(snaps) + bad)
        await produce(kafka_bootstrap, topics.events, keyed(events))
        alerts = await consume_all(kafka_bootstrap, topics.alerts, expected=6, timeout=60)
        dlq = await consume_all(kafka_bootstrap, Topics.dlq(topics.samples), expected=2, timeout=30)
        await wait_for(lambda: _at_least(kafka_bootstrap, topics.summaries, 8), 30, "8 summaries")
        summaries = await read_summaries(kafka_bootstrap, topics.summaries, 2)
    finally:
        await asyncio.wait_for(app.stop(), timeout=60)

    got = sorted(transition_ids([r.value for r in alerts]))
    want = sorted([(f"{n}:xid79", "firing", T0 + 5) for n in nodes] + [("n0:xid48", "firing", T0 + 7),
                                                                       ("class:cls", "firing", T0 + 90)])
    # The class alert fires on the 3rd of 8 summaries, whichever node's comes third.
    assert [g for g in got if g[0] != "class:cls"] == [w for w in want if w[0] != "class:cls"]
    assert [g[:2] for g in got if g[0] == "class:cls"] == [("class:cls", "firing")]
    assert sorted(s.node for s in summaries) == sorted(nodes * 2)
    errors = sorted(json.loads(r.value)["error"] for r in dlq)
    assert "key: record key 'n2' does not match 'n3'" in errors
    assert any(e.startswith("<record>: Invalid JSON") or "JSON" in e for e in errors), errors


async def _at_least(bootstrap: str, topic: str, n: int) -> bool:
    return len(await read_summaries(bootstrap, topic, 2)) >= n
