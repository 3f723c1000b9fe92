"""The inference stage's Kafka runner: records by node key, transitions to ``alerts``, bad
records to ``inference.metrics.dlq`` with the reason, state envelopes per node."""

from __future__ import annotations

import json

from gpuwarden.contract import DeadLetter, Topics, decode, encode
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.dlq import Inbound, Limits
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.inferencewire import inference_runner
from tests.streams.test_inference_stage import Feed

TOPICS = Topics("")


def _runner() -> tuple[InferenceStage, object]:
    stage = InferenceStage(EngineConfig())
    return stage, inference_runner(stage, TOPICS, Limits(), checkpoint_s=0.0)


def _msgs(values: list[bytes]) -> list[Inbound]:
    return [Inbound(TOPICS.inference, 0, n, b"gn1", v) for n, v in enumerate(values)]


def test_malformed_inference_records_go_to_the_dead_letter_topic_with_the_reason() -> None:
    stage, runner = _runner()
    feed = Feed(stage)
    good = encode(feed.record(ok=600))
    doc = json.loads(good)
    doc["histograms"] = [{"name": "ttft", "metric": "m", "bounds": [0.1, 1.0], "counts": [1, 2, 3],
                          "count": 7, "sum": 1.0}]  # count is not the buckets' sum
    bad_count = json.dumps(doc).encode()
    res = runner.run(_msgs([good, b"{not json", bad_count]), lambda key: None, now=feed.record().ts, wall=0.0)
    letters = [decode(o.value, DeadLetter) for o in res.out if o.topic == Topics.dlq(TOPICS.inference)]
    assert res.dead == 2 and res.applied == 1 and len(letters) == 2
    assert "count: 7, but the buckets hold 6" in letters[1].error
    assert set(res.state) == {"gn1"}  # the good record's state, checkpointed under its node


def test_transitions_go_to_alerts_and_state_survives_a_takeover() -> None:
    stage, runner = _runner()
    feed = Feed(stage)
    values = []
    for _ in range(12):
        values.append(encode(feed.record(failed=600)))
        feed.minute += 1
        feed.seq += 1
    now = feed.record().ts
    first = runner.run(_msgs(values[:6]), lambda key: None, now=now, wall=0.0)
    stored = first.state
    # another worker takes the partition over from the stored envelope, and reads on
    stage2, runner2 = _runner()
    runner2.reassigned()
    second = runner2.run(_msgs(values), stored.get, now=now, wall=0.0)
    assert second.skipped == 6 and second.applied == 6
    alerts = [o for o in first.out + second.out if o.topic == TOPICS.alerts]
    assert alerts and all(json.loads(o.value)["rule"] == "inference-failures" for o in alerts)
