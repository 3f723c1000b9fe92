"""The inference stages' Kafka runners: records by node key, transitions to ``alerts``, SLIs to
``inference.sli`` with progress reports behind them, the service stage's runner gated by them;
bad records to their dead-letter topics with the reason, state envelopes per key."""

from __future__ import annotations

import json

from gpuwarden.contract import DeadLetter, Topics, decode, encode
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.dlq import Inbound, Limits
from gpuwarden.streams.inferencestage import InferenceStage
from gpuwarden.streams.inferencewire import ServiceGates, SliProgress, inference_runner
from gpuwarden.streams.progress import is_progress
from gpuwarden.streams.servicestage import ServiceStage
from tests.streams.test_inference_stage import Feed

TOPICS = Topics("")


def _runner(config: EngineConfig | None = None) -> tuple[InferenceStage, object]:
    stage = InferenceStage(config or EngineConfig())
    progress = SliProgress(stage, lambda node: True, TOPICS.sli, 2, 300.0, 60.0)
    return stage, inference_runner(stage, TOPICS, Limits(), 0.0, progress)


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


def test_slis_and_progress_reach_the_service_stage_through_its_gate() -> None:
    """Two input partitions, each reported to both ``inference.sli`` partitions; the service's
    minutes are released once both partitions' reports have passed them."""
    cfg = EngineConfig.model_validate({"slo": {"chat": {"error_rate": "1%"}}})
    stage = InferenceStage(cfg)
    progress = SliProgress(stage, lambda node: True, TOPICS.sli, 2, 300.0, 60.0)
    runner = inference_runner(stage, TOPICS, Limits(), 0.0, progress)
    feed = Feed(stage)
    values = []
    for _ in range(12):
        values.append(encode(feed.record(ok=400, failed=200)))
        feed.minute += 1
        feed.seq += 1
    now = feed.record().ts
    res = runner.run(_msgs(values), lambda key: None, now=now, wall=0.0)
    slis = [o for o in res.out if o.topic == TOPICS.sli]
    assert slis and all(o.key == b"chat" for o in slis)
    reports = progress.reports({0, 1}, set(), 0.0)  # partition 0 holds gn1; partition 1 is empty
    assert len(reports) == 4 and all(is_progress(o.headers) for o in reports)
    gates = ServiceGates(ServiceStage(cfg), TOPICS, Limits(), sources=2, lateness=300.0, skew=6 * 3600.0)
    fleet = gates.runner(0.0)
    sli_msgs = [Inbound(TOPICS.sli, 0, n, o.key, o.value) for n, o in enumerate(slis)]
    bad = Inbound(TOPICS.sli, 0, len(sli_msgs), b"chat", b'{"schema":"service_sli/1","ts":1}')
    held = fleet.run([*sli_msgs, bad], lambda key: None, now=now, wall=0.0)
    assert not [o for o in held.out if o.topic == TOPICS.alerts]  # no report read yet: the gate holds
    letters = [decode(o.value, DeadLetter) for o in held.out if o.topic == Topics.dlq(TOPICS.sli)]
    assert len(letters) == 1 and "service" in letters[0].error
    mine = [Inbound(TOPICS.sli, 0, 100 + n, o.key, o.value) for n, o in enumerate(reports)
            if o.partition == 0]
    opened = fleet.run([], lambda key: None, now=now, wall=0.0, settle=gates.settle(mine, fleet.synced))
    rules = {json.loads(o.value)["rule"] for o in opened.out if o.topic == TOPICS.alerts}
    assert "slo-fast-burn" in rules  # 33 % failed against 1 %
