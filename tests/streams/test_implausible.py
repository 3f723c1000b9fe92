"""Records dated implausibly far in the past (a node booting with its clock at 1970, before NTP
syncs) never raise or resolve alerts, in the engine itself (replay, `gpuwarden run`) as at the
workers' boundary (tests/streams_kafka/test_poison.py)."""

from __future__ import annotations

from typing import Any

from gpuwarden.contract import NodeSnapshot, encode
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from tests.history.builders import gw

T0 = 1_790_000_000.0


def fleet() -> list[Any]:
    return list(Simulator(["xid-79"], nodes=1, gpus=4, seed=3, start_ts=T0, tick_s=10.0,
                          onset_s=600.0).run(3600.0))


def reset_clock(records: list[Any], ts: float = 86415.0) -> NodeSnapshot:
    """A snapshot of the node after its XID (one GPU without readings) as the node sends it
    before its clock is synced. Released as the node's first record it raised gpu-lost in
    1970 and resolved it on the real alert's fingerprint."""
    snaps = [r for r in records if isinstance(r, NodeSnapshot)]
    mid = snaps[len(snaps) // 2]
    return mid.model_copy(update={"ts": ts, "seq": mid.seq + 10**6})


def ids(transitions: list[Any]) -> list[tuple[str, str, str, float]]:
    return [(t.rule, t.fingerprint, t.state.value, t.started_at) for t in transitions]


def run(records: list[Any]) -> tuple[list[Any], Engine]:
    engine = Engine()
    return engine.process_many(records) + engine.flush(), engine


def test_a_first_record_from_1970_sets_no_watermark_and_raises_nothing() -> None:
    records = fleet()
    want, _ = run(records)
    assert want, "the scenario must alert"
    got, engine = run([reset_clock(records), *records])
    assert ids(got) == ids(want)
    assert all(t.started_at > T0 - 60 for t in got)
    assert engine.counters()["implausible"] == 1


def test_records_far_behind_their_node_are_set_aside() -> None:
    records = fleet()
    want, _ = run(records)
    half = len(records) // 2
    got, engine = run([*records[:half], reset_clock(records, T0 - 8 * 86400), *records[half:]])
    assert ids(got) == ids(want)
    assert engine.counters()["implausible"] == 1


def test_replay_skips_the_1970_record_and_says_so(tmp_path) -> None:
    records = fleet()
    plain, dated = tmp_path / "plain.jsonl", tmp_path / "reset.jsonl"
    plain.write_text("".join(encode(r).decode() + "\n" for r in records))
    dated.write_text(encode(reset_clock(records)).decode() + "\n" + plain.read_text())
    want = gw("replay", "--from-file", str(plain), "--json")
    got = gw("replay", "--from-file", str(dated), "--json")
    assert want.returncode == got.returncode == 0, got.stderr
    assert got.stdout == want.stdout and want.stdout
    assert "1 set aside as dated over limits.max_past_skew behind their node's newest" in got.stderr
