"""Stage 1 fed fetch by fetch, as the faust topology feeds it while catching up on a backlog.

One partition holds the nodes' three inputs; a fetch is a contiguous offset range per
input, merged by timestamp. After a takeover one input's fetch can run hours ahead of
another's (task metrics are small). With :class:`gpuwarden.streams.backlog.Backlog` judging each
record's "behind" inputs and the nodes settled at each fetch's end, the stage releases
exactly what the in-process stage releases, and drops nothing as late.
"""

from __future__ import annotations

import heapq
from functools import cache
from typing import Any

from gpuwarden.contract import GpuEvent, NodeSnapshot, TaskMetric, encode
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.backlog import Backlog
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import StageOutput
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.rules import load_rules

T0 = 1_700_000_000.0
RULES = load_rules(None)
CONFIG = EngineConfig(allowed_lateness=1800)
TOPICS = {NodeSnapshot: "samples", GpuEvent: "events", TaskMetric: "metrics"}
RANKS = {"samples": 0, "events": 1, "metrics": 2}


@cache
def _records(events_of: str | None = None) -> tuple[Any, ...]:
    """2 h of two nodes (faults from 15 min); with ``events_of``, only that node's GPU events.
    Stage 1's inputs only (the inference stage has its own)."""
    sim = Simulator("mixed", nodes=2, gpus=4, seed=3, start_ts=T0, tick_s=10.0, onset_s=900.0)
    return tuple(r for r in sim.run(7200) if type(r) in TOPICS  # not the inference or scheduler records
                 and (events_of is None or not isinstance(r, GpuEvent) or r.node == events_of))


def _outputs(out: StageOutput) -> dict[str, list[bytes]]:
    """Per node, in order (nodes are released independently, so only each node's order is defined)."""
    per: dict[str, list[bytes]] = {}
    for x in (*out.transitions, *out.summaries):
        per.setdefault(x.node if hasattr(x, "node") else x.labels["node"], []).append(encode(x))
    return per


def _in_process(records: tuple[Any, ...]) -> dict[str, list[bytes]]:
    stage, out = NodeStage(RULES, CONFIG), StageOutput([], [])
    for r in records:
        stage.process(r, out=out)
    return _outputs(out)


def _by_topic(records: tuple[Any, ...]) -> dict[str, list[Any]]:
    topics: dict[str, list[Any]] = {t: [] for t in RANKS}
    for r in records:
        topics[TOPICS[type(r)]].append(r)
    return topics


def _fetched(records: tuple[Any, ...], fetches: list[dict[str, int]], *, per_record: bool = True,
             settle: bool = True, keyed: bool = True,
             held: dict[str, int] | None = None) -> tuple[dict[str, list[bytes]], NodeStage]:
    """Feed ``records`` as fetches: each maps topic -> how many of its records it reaches.
    ``keyed=False`` gives every record the same key (judged per partition, as before);
    ``held`` collects each node's largest reorder buffer."""
    topics = _by_topic(records)
    stage, out, backlog = NodeStage(RULES, CONFIG), StageOutput([], []), Backlog(RANKS)
    read = dict.fromkeys(RANKS, 0)

    def key(r: Any) -> bytes | None:
        return r.node.encode() if keyed else None

    for upto in fetches:
        parts, last = [], {}
        for t, n in upto.items():
            if n > read[t]:
                parts.append([(r.ts, t, off, r) for off, r in enumerate(topics[t][read[t]:n], read[t])])
                for off in range(read[t], n):
                    last[t, 0, key(topics[t][off])] = off
                read[t] = n
        beyond = {RANKS[t] for t in RANKS if read[t] < len(topics[t])}
        backlog.start(last, {0: beyond})
        for _, t, off, r in heapq.merge(*parts, key=lambda x: x[0]):
            behind = backlog.behind(t, 0, off, key(r)) if per_record else backlog.behind_at_end(0)
            stage.process(r, behind, out=out)
            if held is not None:
                held[r.node] = max(held.get(r.node, 0), len(stage.state(r.node).buffer))
        if settle:
            for node in stage.nodes():
                stage.advance(node, backlog.behind_at_end(0), out)
    return _outputs(out), stage


def _ahead() -> list[dict[str, int]]:
    """Fetch 1: a third of the samples but every metric and event (hours ahead); fetch 2: the rest."""
    topics = _by_topic(_records())
    return [{"samples": len(topics["samples"]) // 3, "events": len(topics["events"]),
             "metrics": len(topics["metrics"])},
            {"samples": len(topics["samples"])}]


def test_an_input_fetched_hours_ahead_releases_nothing_early() -> None:
    got, stage = _fetched(_records(), _ahead())
    assert stage.counters()["late"] == 0
    assert got == _in_process(_records())


def test_judging_behind_at_the_fetch_end_drops_the_samples_after_a_fetch_start_as_late() -> None:
    # The bug this replaces: at the first sample of fetch 2 the samples were judged caught up,
    # the metrics hours ahead released the buffer, and every later sample of fetch 2 was late.
    got, stage = _fetched(_records(), _ahead(), per_record=False)
    assert stage.counters()["late"] > 0
    assert got != _in_process(_records())


def test_a_node_held_by_another_nodes_backlog_is_released_at_the_fetch_end() -> None:
    # sim-node-01 has no GPU events: while the events input is behind, its watermark holds at the
    # max source skew. Fetch 2 reads only node-00's events, so sim-node-01 gets no record there.
    records = _records(events_of="sim-node-00")
    topics = _by_topic(records)
    fetches = [{"samples": len(topics["samples"]), "metrics": len(topics["metrics"]),
                "events": len(topics["events"]) // 2},
               {"events": len(topics["events"])}]
    assert {r.node for r in topics["events"][len(topics["events"]) // 2:]} == {"sim-node-00"}
    got, stage = _fetched(records, fetches)
    assert stage.counters()["late"] == 0
    assert got == _in_process(records)
    unsettled, _ = _fetched(records, fetches, settle=False)
    assert unsettled["sim-node-00"] == got["sim-node-00"]
    assert len(unsettled.get("sim-node-01", [])) < len(got["sim-node-01"])  # sim-node-01 would wait for its next record


def test_a_node_is_not_held_by_its_partition_mates_records_later_in_the_fetch() -> None:
    # One fetch of everything; sim-node-01 has no GPU events. Judged per partition, node-00's
    # events later in the fetch held sim-node-01 at the max source skew: its whole backlog sat in
    # its reorder buffer. Judged per key, it is held by its own inputs only (the lateness).
    records = _records(events_of="sim-node-00")
    topics = _by_topic(records)
    fetch = [{t: len(rs) for t, rs in topics.items()}]
    keyed, shared = {}, {}
    got, stage = _fetched(records, fetch, held=keyed)
    assert got == _in_process(records) and stage.counters()["late"] == 0
    old, _ = _fetched(records, fetch, keyed=False, held=shared)
    assert old == got
    alone, lateness_only = NodeStage(RULES, CONFIG), 0  # in process: held for the lateness only
    for r in records:
        alone.process(r, out=StageOutput([], []))
        if r.node == "sim-node-01":
            lateness_only = max(lateness_only, len(alone.state("sim-node-01").buffer))
    assert keyed["sim-node-01"] <= lateness_only + 1
    assert shared["sim-node-01"] > 2 * lateness_only


def test_backlog_drops_an_input_at_its_last_fetched_record_unless_more_is_past_the_fetch() -> None:
    backlog = Backlog(RANKS)
    backlog.start({("samples", 0, b"a"): 10, ("metrics", 0, b"a"): 4, ("events", 0, b"b"): 6},
                  {0: {2}, 1: set()})
    assert backlog.behind("samples", 0, 9, b"a") == {0, 2}
    assert backlog.behind("samples", 0, 10, b"a") == {2}  # samples caught up with their last record
    assert backlog.behind("metrics", 0, 4, b"a") == {2}  # metrics have more past the fetch
    assert backlog.behind("events", 0, 5, b"b") == {1, 2}  # b's events only: a's are not b's
    assert backlog.behind("events", 0, 6, b"b") == {2}
    assert backlog.behind_at_end(0) == {2}
    assert backlog.behind("samples", 1, 0, b"a") == set() and backlog.behind_at_end(3) == set()


def test_a_partition_left_out_of_a_fetch_keeps_what_its_last_fetch_left() -> None:
    """Its nodes may still be held (an input behind at its end): the idle re-judgement in
    streams/topology.py looks for them after later fetches of other partitions."""
    backlog = Backlog(RANKS)
    backlog.start({("samples", 3, b"a"): 7}, {3: {1}})
    backlog.start({("samples", 0, b"b"): 2}, {0: set()})  # a later fetch without partition 3
    assert backlog.behind_at_end(3) == {1}
    assert backlog.behind_at_end(0) == set()
    backlog.start({}, {3: set()})  # judged again: caught up
    assert backlog.behind_at_end(3) == set()
