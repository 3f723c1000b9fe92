"""The engine: dedup, lateness, reordering, determinism, dump/load continuity, bad records."""

from __future__ import annotations

import random

import pytest

from gpuwarden.contract import GpuEvent, NodeSnapshot, Silence, encode
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams import statecodec
from gpuwarden.streams.engine import Engine

T0 = 1_700_000_000.0


def _records(scenario: str = "mixed", minutes: float = 20, nodes: int = 2) -> list:
    sim = Simulator(scenario, nodes=nodes, gpus=8, seed=3, start_ts=T0, tick_s=5)
    return list(sim.run(minutes * 60))


def _bytes(transitions: list) -> list[bytes]:
    return [encode(t) for t in transitions]


def _run(records: list, engine: Engine | None = None) -> list[bytes]:
    e = engine or Engine()
    return _bytes(e.process_many(records) + e.flush())


def test_same_input_same_order_gives_byte_identical_transitions() -> None:
    recs = _records()
    a, b = _run(recs), _run(recs)
    assert a and a == b


def test_duplicates_are_ignored_and_counted() -> None:
    recs = _records("xid-79", 10, 1)
    doubled = [r for rec in recs for r in (rec, rec)]
    e = Engine()
    assert _run(doubled, e) == _run(recs)
    assert e.counters()["duplicates"] == len(recs)


def test_out_of_order_within_lateness_gives_the_same_alerts() -> None:
    recs = _records("ecc-dbe", 15, 1)
    rng = random.Random(7)
    # Shuffle within windows of 4 records (at 5 s ticks: well inside the 30 s allowed lateness).
    shuffled = []
    for i in range(0, len(recs), 4):
        chunk = recs[i:i + 4]
        rng.shuffle(chunk)
        shuffled.extend(chunk)
    assert shuffled != recs
    e1, e2 = Engine(), Engine()
    r1 = [(t.fingerprint, t.state.value) for t in e1.process_many(shuffled) + e1.flush()]
    r2 = [(t.fingerprint, t.state.value) for t in e2.process_many(recs) + e2.flush()]
    assert r1 == r2 and r1
    assert e1.counters()["late"] == 0


def test_records_later_than_allowed_are_dropped_and_counted() -> None:
    recs = _records("healthy", 5, 1)
    snaps = [r for r in recs if isinstance(r, NodeSnapshot)]
    e = Engine(config=EngineConfig(allowed_lateness=10))
    e.process_many(snaps)
    old = snaps[5].model_copy(update={"seq": 10_000})
    assert e.process(old) == []
    assert e.counters()["late"] == 1


def test_dump_load_continues_exactly() -> None:
    recs = _records("mixed", 30)
    whole = _run(recs)
    first = Engine()
    out = first.process_many(recs[: len(recs) // 2])
    state = first.dump_all()
    second = Engine()
    second.load_all(state)
    assert second.dump_all() == state
    out += second.process_many(recs[len(recs) // 2:]) + second.flush()
    assert _bytes(out) == whole


def test_state_of_another_format_is_refused_saying_so() -> None:
    import json

    e = Engine()
    e.process_many(_records("mixed", 5))
    node = e.nodes.nodes()[0]
    head, *lines = e.nodes.dump(node).split(b"\n")
    doc = json.loads(head)
    assert doc["gws"] == statecodec.FORMAT and doc["s"]["buffer"] == []  # the buffer follows as lines
    for old in (3, 4, 5):
        doc["gws"] = old
        with pytest.raises(ValueError, match=f"engine state format {old}, this version reads "
                                             f"{statecodec.FORMAT}: start with fresh state"):
            Engine().nodes.load(node, b"\n".join([json.dumps(doc).encode(), *lines]))


def test_records_a_stage_cannot_use_are_ignored() -> None:
    e = Engine()
    s = Silence(id="s", matchers=[{"label": "node", "value": "x"}], starts_at=0, ends_at=1, created_by="me")
    assert e.process(s) == []
    ev = GpuEvent(ts=T0, node="n", seq=0, boot_id="b", kind="agent", source="agent", message="hello")
    assert e.process(ev) == [] and e.flush() == []


def test_every_alert_has_evidence_labels_and_action() -> None:
    e = Engine()
    out = e.process_many(_records("mixed", 40)) + e.flush()
    firing = [t for t in out if t.state.value == "firing"]
    assert firing
    for t in firing:
        assert t.action and t.summary and "?" not in t.summary, t
        assert "node" in t.labels or "cluster" in t.labels or (t.rule == "version-skew" and "task" in t.labels), t
        ev = t.evidence
        assert ev.values or ev.count or ev.note, t
        assert ev.held_for_s is not None


def _xid(seq: int, ts: float, code: int, gpu: int = 2, kind: str = "xid") -> GpuEvent:
    from gpuwarden.producers.xid import lookup

    return GpuEvent(ts=ts, node="n1", seq=seq, boot_id="b", kind=kind, source="kmsg", gpu_index=gpu,
                    code=code, catalogue=lookup(code) if kind == "xid" else None, message="m")


def test_application_xid_is_attention_and_repeats_escalate_to_critical() -> None:
    # No simulator scenario emits application XIDs or driver errors: synthetic events.
    e = Engine(config=EngineConfig(allowed_lateness=0))
    first = e.process(_xid(0, T0, 13))
    assert [(t.rule, t.tier.value) for t in first] == [("xid-application", "attention")]
    e.process(_xid(1, T0 + 60, 31))
    third = e.process(_xid(2, T0 + 120, 43))
    assert ("xid-repeated", "critical") in [(t.rule, t.tier.value) for t in third]
    driver = e.process(_xid(3, T0 + 130, 0, gpu=None, kind="driver"))  # type: ignore[arg-type]
    assert [(t.rule, t.tier.value) for t in driver] == [("driver-error", "critical")]


def test_xids_across_the_gpus_of_one_node_escalate_to_the_node() -> None:
    # xid-node-repeated: 4 warning/fatal XIDs within 1 h on one node, none repeated on a GPU.
    e = Engine(config=EngineConfig(allowed_lateness=0))
    out = [t for i in range(3) for t in e.process(_xid(i, T0 + 300 * i, 13, gpu=i))]
    assert "xid-node-repeated" not in {t.rule for t in out}
    assert "xid-repeated" not in {t.rule for t in out}  # one XID per GPU: no per-GPU repeat
    fourth = e.process(_xid(3, T0 + 900, 31, gpu=3))
    node = [t for t in fourth if t.rule == "xid-node-repeated"]
    assert [(t.tier.value, t.labels["node"], t.evidence.count) for t in node] == [("critical", "n1", 4)]
    assert "gpu" not in node[0].labels
    # Outside the window the node has calmed down: a fifth XID two hours on is not a repeat.
    later = Engine(config=EngineConfig(allowed_lateness=0))
    for i in range(3):
        later.process(_xid(i, T0 + 300 * i, 13, gpu=i))
    assert "xid-node-repeated" not in {t.rule for t in later.process(_xid(3, T0 + 7200, 31, gpu=3))}
