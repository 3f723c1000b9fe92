"""Which keys a worker keeps in memory across rebalances (streams/topology.py, Topology.book_assignment).

A worker keeps a key's in-memory state only if it held the key's partitions through every
generation since it last synced the key. Before, "kept" was the assignment at one recovery's
end intersected with the assignment at the previous one: a worker that held partition 0 in
generation 2, had it taken over by another worker in generation 3 (which applied records and
committed their offsets), and got it back in generation 4 kept its generation-2 state, and read
on from the other worker's offsets: the seed-1 random-kill runs saw hundreds of stage-1 summaries
with other content after such a takeover. No broker: the faust app is built, never started.
"""

from __future__ import annotations

from pathlib import Path

from faust.types import TP

from gpuwarden.contract import Topics, encode
from gpuwarden.streams.dlq import Inbound
from gpuwarden.streams.topology import Topology
from tests.streams_kafka.records import T0, settings_for, snapshot
from tests.streams_kafka.standin import StandinClassStage, StandinNodeStage


def topology(tmp_path: Path) -> tuple[Topology, Topics]:
    settings = settings_for("127.0.0.1:9", partitions=2)
    topo = Topology(settings, worker_id="w1", data_dir=tmp_path,
                    node_stage=StandinNodeStage(every=5), class_stage=StandinClassStage(after=3))
    return topo, Topics(settings.kafka.topic_prefix)


def apply_one(topo: Topology, topics: Topics, node: str, partition: int, offset: int) -> None:
    """One snapshot of ``node`` read from ``partition``: the runner syncs the key and applies it."""
    record = snapshot(node, offset, T0 + offset)
    msg = Inbound(topics.samples, partition, offset, node.encode(), encode(record))
    topo.node_runner.run([msg], lambda key: None)


def assign(topo: Topology, generation: int, *tps: TP) -> None:
    topo.app.consumer_generation_id = generation
    topo.book_assignment(set(tps))


def test_a_partition_owned_by_another_worker_in_between_is_not_kept(tmp_path: Path) -> None:
    topo, topics = topology(tmp_path)
    p0, p1 = TP(topics.samples, 0), TP(topics.samples, 1)
    assign(topo, 1, p0, p1)
    apply_one(topo, topics, "n0", 0, 10)
    apply_one(topo, topics, "n1", 1, 10)
    assert topo.node_runner.synced("n0") and topo.node_runner.synced("n1")

    assign(topo, 2, p1)        # partition 0 goes to the other worker, which moves it on
    assign(topo, 3, p0, p1)    # and comes back
    assert not topo.node_runner.synced("n0")  # re-synced from the changelog at its next record
    assert topo.node_runner.synced("n1")      # held throughout


def test_a_completion_seen_late_does_not_make_a_partition_kept(tmp_path: Path) -> None:
    """faust signals a recovery's completion also when the next rebalance already began; the
    assignment is booked once per generation, whichever of the two signals comes first."""
    topo, topics = topology(tmp_path)
    p0, p1 = TP(topics.samples, 0), TP(topics.samples, 1)
    assign(topo, 1, p0, p1)
    apply_one(topo, topics, "n0", 0, 10)
    assign(topo, 2, p1)
    topo.book_assignment({p1})  # the same generation again (its completion): no change
    assign(topo, 3, p0, p1)
    topo.book_assignment({p0, p1})
    assert not topo.node_runner.synced("n0")


def test_a_generation_this_worker_was_not_part_of_keeps_nothing(tmp_path: Path) -> None:
    """Generation ids are consecutive: from 1 to 3, this worker was out of the group in 2 (a
    session timeout) and another worker may have owned every partition meanwhile."""
    topo, topics = topology(tmp_path)
    p0, p1 = TP(topics.samples, 0), TP(topics.samples, 1)
    assign(topo, 1, p0, p1)
    apply_one(topo, topics, "n0", 0, 10)
    apply_one(topo, topics, "n1", 1, 10)
    assign(topo, 3, p0, p1)
    assert not topo.node_runner.synced("n0") and not topo.node_runner.synced("n1")


def test_consecutive_generations_keep_what_was_held(tmp_path: Path) -> None:
    topo, topics = topology(tmp_path)
    p0, p1 = TP(topics.samples, 0), TP(topics.samples, 1)
    assign(topo, 1, p0)
    apply_one(topo, topics, "n0", 0, 10)
    assign(topo, 2, p0, p1)
    assign(topo, 3, p0)
    assert topo.node_runner.synced("n0")
