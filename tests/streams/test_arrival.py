"""Rules one event decides alone fire on the event's arrival, not 30 s of lateness later, and
the transitions stay those of the ordered engine (issue #18, defect 5; streams/arrival.py)."""

from __future__ import annotations

import random

import pytest

from gpuwarden.contract import GpuEvent, GpuSample, NodeSnapshot, encode
from gpuwarden.producers.simulator import Simulator
from gpuwarden.producers.xid import lookup
from gpuwarden.streams.arrival import arrival_rules
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import load_rules

T0 = 1_700_000_000.0

#: The default rules that one event decides alone (docs/rules.md lists them).
ON_ARRIVAL = ["xid-hardware", "gpu-recovery-reset", "gpu-recovery-reboot", "gpu-recovery-drain-p2p", "xid-application", "xid-other", "ecc-double-bit", "row-remap", "gpu-lost",
              "driver-error"]


def test_the_default_pack_judges_these_rules_on_arrival() -> None:
    pack = load_rules()
    assert [a.rule.name for a in arrival_rules(pack.rules)] == ON_ARRIVAL


def _snap(seq: int, ts: float) -> NodeSnapshot:
    return NodeSnapshot.of(node="n1", seq=seq, boot_id="b", agent_version="t", ts=ts,
                           gpus=[GpuSample(index=0, uuid="GPU-0", util_gpu=90.0)])


def test_xid_79_pages_with_the_tick_that_carries_it_on_a_live_feed() -> None:
    """1 Hz snapshots, default lateness (30 s): the agent hands over an XID seen between two ticks
    with the next tick (its records sorted by ts: the events, then the snapshot). The page goes out
    as that tick is processed, not 30 s later; the ordered evaluation gives nothing more, and the
    resolve still comes. The event alone waits for the snapshot that reaches its ts: the labels of
    the announcement are then those of the ordered evaluation however the inputs were batched."""
    engine = Engine(config=EngineConfig())
    for i in range(60):
        assert engine.process(_snap(i, T0 + i)) == []
    xid = GpuEvent(node="n1", seq=1000, boot_id="b", ts=T0 + 59.5, kind="xid", source="nvml", code=79,
                   gpu_index=0, gpu_uuid="GPU-0", message="GPU has fallen off the bus", catalogue=lookup(79))
    lost = GpuEvent(node="n1", seq=1001, boot_id="b", ts=T0 + 59.5, kind="gpu_lost", source="nvml",
                    gpu_index=0, gpu_uuid="GPU-0")
    assert engine.process(xid) + engine.process(lost) == []  # the snapshot of 59.5 s may still come
    now = engine.process(_snap(60, T0 + 60))
    assert [(t.rule, t.state.value, t.ts) for t in now] == [("xid-hardware", "firing", T0 + 59.5),
                                                            ("gpu-lost", "firing", T0 + 59.5)]
    assert now[0].tier.value == "critical" and now[0].evidence.count == 1
    later = [t for i in range(61, 200) for t in engine.process(_snap(i, T0 + i))]
    assert [t for t in later if t.state.value == "firing"] == []
    assert engine.counters()["arrival_corrected"] == 0


def _lagging_events(records: list, seed: int) -> list:
    """Events arrive up to 20 s late (in their own order, as one agent's topic delivers them),
    task metrics shuffled within 20 s, every 10th record twice."""
    rng = random.Random(seed)
    lag, keyed = 0.0, []
    for n, r in enumerate(records):
        if isinstance(r, GpuEvent):
            lag = max(lag - 5.0, rng.choice([0.0, 5.0, 10.0, 20.0]))
            delay = lag
        else:
            delay = 0.0 if isinstance(r, NodeSnapshot) else 5.0 * rng.randrange(5)
        keyed.append((r.ts + delay, n, r))
    keyed += [(ts + 10.0, n, r) for ts, n, r in keyed[::10]]
    return [r for _, _, r in sorted(keyed, key=lambda k: (k[0], k[1]))]


def _transitions(records: list) -> tuple[list[str], Engine]:
    engine = Engine(config=EngineConfig(observation_period=1200.0))
    out = [encode(t).decode() for r in records for t in engine.process(r)]
    out += [encode(t).decode() for t in engine.flush()]
    return out, engine


@pytest.mark.parametrize("scenario", ["xid-79", "ecc-dbe", "xid-app-error", "xid-node-repeat", "driver-error"])
def test_out_of_order_and_duplicated_delivery_gives_the_replay_transitions(scenario: str) -> None:
    """Replay (records in order) and a live delivery (events late, metrics shuffled, copies)
    give the same transitions, and every firing of an on-arrival rule was sent on arrival."""
    records = list(Simulator(scenario, nodes=2, gpus=4, seed=1, start_ts=T0, tick_s=5.0).run(45 * 60))
    replay, _ = _transitions(records)
    live, engine = _transitions(_lagging_events(records, 3))
    assert sorted(live) == sorted(replay)
    assert engine.counters()["arrival_corrected"] == 0
    assert engine.counters()["duplicates"] > 0
    assert any(f'"rule":"{r}"' in t for t in replay for r in ON_ARRIVAL)


def _owned(seq: int, ts: float) -> NodeSnapshot:
    from gpuwarden.contract import GpuProcess

    return NodeSnapshot.of(node="n1", seq=seq, boot_id="b", agent_version="t", ts=ts,
                           gpus=[GpuSample(index=0, uuid="GPU-0", util_gpu=90.0)],
                           processes=[GpuProcess(gpu_index=0, pid=7, task_id="job-1", user="alice", task="train")])


def test_a_snapshot_older_than_the_event_that_comes_after_it_is_read_before_the_announcement() -> None:
    """Kafka batches a node's snapshots and events apart: the event may come first. Its
    announcement waits until the node's snapshots reach its ts, so it reads the snapshot of 2 s
    (the job is gone): what the ordered evaluation will give, and no correction after it."""
    engine = Engine(config=EngineConfig())
    engine.process(_owned(0, T0))
    xid = GpuEvent(node="n1", seq=1000, boot_id="b", ts=T0 + 2.5, kind="xid", source="nvml", code=79,
                   gpu_index=0, gpu_uuid="GPU-0", catalogue=lookup(79))
    assert engine.process(xid) == []
    assert engine.process(_snap(1, T0 + 2)) == []  # older than the event: it may be followed by one older still
    first = engine.process(_snap(2, T0 + 3))
    assert [t.rule for t in first] == ["xid-hardware"] and "task" not in first[0].labels
    later = [t for i in range(4, 60) for t in engine.process(_snap(i, T0 + i))]
    assert [t for t in later if t.rule == "xid-hardware" and t.state.value == "firing"] == []
    assert engine.counters()["arrival_corrected"] == 0


def test_a_snapshot_that_comes_after_a_newer_one_sends_the_ordered_firing_as_a_correction() -> None:
    """An announcement reads the snapshots that have arrived; one that comes out of its own order
    (older than the node's newest snapshot, after the event was announced) and changes the GPU's
    owner makes the ordered firing differ: it is sent too, as a correction."""
    engine = Engine(config=EngineConfig())
    engine.process(_owned(0, T0))
    engine.process(_owned(3, T0 + 3))
    xid = GpuEvent(node="n1", seq=1000, boot_id="b", ts=T0 + 2.5, kind="xid", source="nvml", code=79,
                   gpu_index=0, gpu_uuid="GPU-0", catalogue=lookup(79))
    first = engine.process(xid)
    assert first[0].labels["task"] == "job-1"
    engine.process(_snap(1, T0 + 2))  # the job is gone in a snapshot older than the event, come late
    later = [t for i in range(4, 60) for t in engine.process(_snap(i, T0 + i))]
    fired = [t for t in later if t.rule == "xid-hardware" and t.state.value == "firing"]
    assert len(fired) == 1 and "task" not in fired[0].labels
    assert engine.counters()["arrival_corrected"] == 1
