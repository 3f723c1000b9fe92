"""The keyed runner under every task: batches, dead letters, offset-tracked state envelopes."""

from __future__ import annotations

import base64
import json

import pytest

from gpuwarden.contract import GpuEvent, NodeSnapshot, TaskMetric, TaskMetrics, decode, encode
from gpuwarden.streams.dlq import Inbound, Limits, Outbound, salvage_inbound
from gpuwarden.streams.keyed import KeyedRunner, Source, pack, unpack
from tests.streams_kafka.records import T0, snapshot, xid
from tests.streams_kafka.standin import StandinNodeStage

TOPIC = "p.gpu.samples"
EVENTS = "p.gpu.events"


def runner(stage: StandinNodeStage) -> KeyedRunner:
    def emit(record: object, msg: Inbound) -> list[Outbound]:
        out = stage.process(record)
        return [Outbound("alerts", t.fingerprint.encode(), encode(t)) for t in out.transitions] + \
               [Outbound("summaries", s.task.encode(), encode(s)) for s in out.summaries]

    return KeyedRunner(stage, {
        TOPIC: Source(NodeSnapshot, lambda r: r.node, TOPIC + ".dlq"),
        EVENTS: Source(GpuEvent, lambda r: r.node, EVENTS + ".dlq"),
    }, emit, Limits())


def msg(record: object, offset: int, topic: str = TOPIC, partition: int = 0) -> Inbound:
    return Inbound(topic, partition, offset, record.node.encode(), encode(record))


def test_envelope_round_trip_and_rejects_foreign_bytes() -> None:
    data = pack({"t:0": 41, "u:1": 7}, b"\x00state\n")
    assert unpack(data) == ({"t:0": 41, "u:1": 7}, b"\x00state\n")
    with pytest.raises(ValueError, match="bad magic"):
        unpack(b"XXXX\x00\x00\x00\x00")
    with pytest.raises(ValueError, match="truncated"):
        unpack(b"GW")
    with pytest.raises(ValueError, match="does not decompress"):
        unpack(data[:-3])


def test_envelope_of_the_zlib_form_is_refused() -> None:
    import struct
    import zlib

    head = b'{"t:0":41}'
    old = struct.pack(">4sI", b"GWS3", len(head)) + head + zlib.compress(b"\x00state\n", 1)
    with pytest.raises(ValueError, match="bad magic b'GWS3'"):
        unpack(old)


def test_a_snapshot_holds_one_envelope_per_key_changed_with_its_last_offsets() -> None:
    r = runner(StandinNodeStage(every=2))
    batch = [msg(snapshot("a", i, T0 + i), 10 + i) for i in range(4)] + [msg(snapshot("b", 0, T0), 3, partition=1)]
    res = r.run(batch, now=T0)
    assert res.applied == 5 and res.dead == 0 and res.skipped == 0
    state = r.snapshot()
    assert set(state) == {"a", "b"} and r.dirty == set()
    assert unpack(state["a"]) == ({f"{TOPIC}:0": 13}, json.dumps({"snapshots": 4, "seen": []}).encode())
    assert state["a"].startswith(b"GWS4")
    assert [o.topic for o in res.out] == ["summaries", "summaries"]
    r.run([msg(snapshot("b", 1, T0 + 1), 4, partition=1)], now=T0)
    assert set(r.snapshot()) == {"b"}  # only what changed since
    assert r.snapshot() == {}


def test_restored_state_skips_records_already_applied_and_matches_uninterrupted_run() -> None:
    records = [msg(snapshot("a", i, T0 + i), i) for i in range(6)] + [msg(xid("a", 0, T0 + 3, 79), 0, EVENTS)]
    whole = runner(StandinNodeStage(every=2))
    whole_out = whole.run(records, now=T0).out

    # First life: applies the first 4 samples and the event, snapshots, then dies.
    first = runner(StandinNodeStage(every=2))
    first_out = first.run(records[:4] + records[6:], now=T0).out
    stored = first.snapshot()
    # A new owner restores the envelope and reads from an older offset: samples 2..5 again.
    second = runner(StandinNodeStage(every=2))
    assert second.restore("a", stored["a"]) and second.keys() == ["a"]
    res = second.run(records[2:6], now=T0)
    assert res.skipped == 2 and res.applied == 2
    assert second.snapshot()["a"] == whole.snapshot()["a"]
    assert sorted(o.value for o in first_out + res.out) == sorted(o.value for o in whole_out)
    assert len(whole_out) == 4


def test_an_envelope_claiming_no_offsets_applies_every_record_after_it() -> None:
    """What ``gpuwarden baseline bootstrap --to-kafka`` writes: state, offsets ``{}``."""
    stage = StandinNodeStage(every=100)
    r = runner(stage)
    assert r.restore("a", pack({}, json.dumps({"snapshots": 51, "seen": [79]}).encode()))
    res = r.run([msg(snapshot("a", 0, T0), 0)], now=T0)
    assert stage.state["a"]["snapshots"] == 52 and res.applied == 1


def test_bad_records_become_dead_letters_and_the_batch_goes_on() -> None:
    class Exploding(StandinNodeStage):
        def process(self, record: object, behind: frozenset = frozenset()):  # type: ignore[no-untyped-def]
            if record.seq == 1:
                raise ZeroDivisionError("boom")
            return super().process(record)

    r = runner(Exploding(every=1))
    far = snapshot("a", 2, T0 + 10_000)
    batch = [Inbound(TOPIC, 0, 0, b"a", b"\xff\xfe"), Inbound(TOPIC, 0, 1, b"a", None),
             msg(snapshot("a", 1, T0), 2), msg(far, 3), msg(snapshot("a", 3, T0 + 1), 4)]
    res = r.run(batch, now=T0)
    dead = [decode(o.value) for o in res.out if o.topic == TOPIC + ".dlq"]
    assert [(d.offset, d.topic, d.partition) for d in dead] == [(0, TOPIC, 0), (1, TOPIC, 0), (2, TOPIC, 0), (3, TOPIC, 0)]
    assert "Invalid JSON" in dead[0].error and base64.b64decode(dead[0].value_b64) == b"\xff\xfe"
    assert dead[1].error == "record: null value (tombstone)"
    assert dead[2].error == "engine: ZeroDivisionError: boom"
    assert dead[3].error.startswith("ts: ") and "in the future" in dead[3].error
    assert base64.b64decode(dead[0].key_b64) == b"a"
    assert res.dead == 4 and res.applied == 2  # the engine failure still moves the offset on


def test_a_task_metrics_batch_applies_its_items_and_dead_letters_only_what_is_bad() -> None:
    """One bad item: a letter of its own (a one-item batch as sent, the reason naming it), the
    other items applied; a bad envelope or a wrong key: the whole record, as any record."""
    topic, applied, stage = "p.task.metrics", [], StandinNodeStage()

    def emit(record: TaskMetric, m: Inbound) -> list[Outbound]:
        applied.append((m.offset, record.node, record.task_id))
        stage.process(record)
        return []

    def runner_() -> KeyedRunner:
        return KeyedRunner(stage, {topic: Source(TaskMetrics, lambda r: r.node, topic + ".dlq",
                                                              unpack=TaskMetrics.unpack, salvage=salvage_inbound)},
                           emit, Limits())

    def batch(*ids: str) -> dict:
        return json.loads(encode(TaskMetrics.of([TaskMetric(node="a", ts=T0 + i, task="c", task_id=t, kind="step")
                                                 for i, t in enumerate(ids)])))

    hurt = batch("t1", "t2", "t3")
    hurt["metrics"][1]["step"] = -5
    records = [Inbound(topic, 0, 0, b"a", json.dumps(batch("t0")).encode()),
               Inbound(topic, 0, 1, b"a", json.dumps(hurt).encode()),
               Inbound(topic, 0, 2, b"a", json.dumps({**batch("t4"), "node": ""}).encode()[:-3]),
               Inbound(topic, 0, 3, b"b", json.dumps(batch("t5")).encode())]
    r = runner_()
    res = r.run(records, now=T0)
    assert applied == [(0, "a", "t0"), (1, "a", "t1"), (1, "a", "t3")]
    dead = [decode(o.value) for o in res.out]
    assert [(d.topic, d.offset) for d in dead] == [(topic, 1), (topic, 2), (topic, 3)] and res.dead == 3
    assert dead[0].error.startswith("metrics[1].step: ")
    assert json.loads(base64.b64decode(dead[0].value_b64))["metrics"] == [hurt["metrics"][1]]
    assert "Invalid JSON" in dead[1].error and dead[2].error.startswith("key: ")


def test_stored_state_of_another_version_starts_the_key_afresh_and_keeps_going() -> None:
    stage = StandinNodeStage(every=2)
    r = runner(stage)
    envelope = pack({f"{TOPIC}:0": 1}, b"\x00 not this version's state")  # the stage's load raises ValueError
    assert not r.restore("a", envelope) and r.keys() == []
    assert not r.restore("b", b"GWS3 an older envelope")
    res = r.run([msg(snapshot("a", i, T0 + i), i) for i in range(4)], now=T0)
    assert res.applied == 4 and res.skipped == 0 and res.dead == 0  # nothing skipped: no state held them
    assert unpack(r.snapshot()["a"])[0] == {f"{TOPIC}:0": 3}


def test_settle_changes_keys_without_a_record_and_the_next_snapshot_holds_them() -> None:
    r = runner(StandinNodeStage(every=100))
    r.run([msg(snapshot("a", 0, T0), 0)], now=T0)
    assert set(r.snapshot()) == {"a"}
    settled = Outbound("alerts", b"fp", b"{}")
    res = r.run([msg(snapshot("b", 0, T0), 0, partition=1)], now=T0, settle=lambda: (["a"], [settled]))
    assert res.out[-1] is settled
    assert set(r.snapshot()) == {"a", "b"}  # "a" changed by the settle, with no record of its own
