"""A partition that stalled with records on the broker past the next one to apply is read again,
also while batches of other partitions keep coming (streams/topology.py, Topology._unstall;
streams/readorder.py, ReadOrder.stalled).

Two ways a survivor stopped after a takeover under load (tests/reliability/test_worker_kill.py,
tests/streams_kafka/test_failover.py, about 1 loaded run in 12): records set aside at the end of
an input, whose seek back brought nothing, were asked again only from the idle tick, and the
tick returns when a batch came since the last one: the worker's own progress reports, read back
from its inputs, kept one coming. And records that faust's fetch loop had handed on (its read
offset past them) never reached the agent, with nothing after them to show the gap: the node
stage waited for that input for good. No broker: the faust app is built, never started; its
consumer is a stand-in that records the seeks, and the broker's end offsets are given.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from faust.types import TP
from faust.types.tuples import Message

from gpuwarden.contract import Topics, encode
from gpuwarden.streams import topology as topology_module
from gpuwarden.streams.readorder import ReadOrder
from gpuwarden.streams.topology import Topology
from tests.streams_kafka.records import T0, settings_for, snapshot
from tests.streams_kafka.standin import StandinClassStage, StandinNodeStage

PATIENCE_S = 0.2


class Consumer:
    """What a batch and the idle tick ask of faust's consumer: the assignment, partition counts,
    earliest offsets, seeks (through ``seek_wait``, which runs them in faust's consumer thread)."""

    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = assigned
        self.seeks: list[tuple[TP, int]] = []

    def assignment(self) -> set[TP]:
        return self.assigned

    def highwater(self, tp: TP) -> int | None:
        return None

    def topic_partitions(self, topic: str) -> int | None:
        return None

    async def earliest_offsets(self, *tps: TP) -> dict[TP, int]:
        return {tp: 0 for tp in tps}

    async def seek_wait(self, partitions: dict[TP, int]) -> None:
        self.seeks.extend(partitions.items())

    async def seek(self, tp: TP, offset: int) -> None:
        raise AssertionError("faust's Consumer.seek runs aiokafka's seek in the caller's thread, "
                             "beside the consumer thread's fetch (KeyError in fetched_records)")


class Worker:
    """A topology over the stand-in consumer: batches of snapshots, idle ticks, the broker's ends."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        settings = settings_for("127.0.0.1:9", partitions=2)
        self.topics = Topics(settings.kafka.topic_prefix)
        self.topo = topo = Topology(settings, worker_id="w1", data_dir=tmp_path,
                                    node_stage=StandinNodeStage(every=1000),
                                    class_stage=StandinClassStage(after=1000))
        self.p0, self.p1 = TP(self.topics.samples, 0), TP(self.topics.samples, 1)
        self.consumer = Consumer({self.p0, self.p1})
        topo.app.consumer = self.consumer
        topo.app.consumer_generation_id = 1
        topo.order = ReadOrder(patience_s=PATIENCE_S)
        topo.book_assignment({self.p0, self.p1})
        self.ends: dict[TP, int] = {}
        self.applied: list[tuple[int, int]] = []
        monkeypatch.setattr(topology_module, "STALL_CHECK_S", 0.0, raising=False)

        async def apply(runner: object, table: object, events: list, records: list, *_: object) -> bool:
            self.applied.extend((m.partition, m.offset) for m in records)  # the stages are not tested here
            return True

        async def send_all(out: object) -> None:
            pass

        async def highwaters(tps: list[TP]) -> dict[TP, int]:
            return {tp: self.ends[tp] for tp in tps if tp in self.ends}

        topo._apply = apply  # type: ignore[method-assign]
        topo._send_all = send_all  # type: ignore[method-assign]
        topo._highwaters = highwaters  # type: ignore[method-assign]

    async def batch(self, partition: int, *offsets: int) -> None:
        events = []
        for offset in offsets:
            record = snapshot(f"n{partition}", offset, T0 + offset)
            msg = Message(self.topics.samples, partition, offset, T0 + offset, 0, [], f"n{partition}".encode(),
                          encode(record), None, generation_id=1)
            events.append(SimpleNamespace(message=msg))
        await self.topo._batch(events)

    async def tick(self) -> None:
        await self.topo._idle()


async def test_records_set_aside_at_the_end_of_an_input_are_sought_again_while_batches_come(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    w = Worker(tmp_path, monkeypatch)
    for tp in (w.p0, w.p1):
        w.topo.order.start(tp, 0)
    w.ends = {w.p0: 6, w.p1: 0}
    # Partition 0: the record at 5 came first (0-4 dropped by faust's fetch loop): set aside.
    await w.batch(0, 5)
    assert w.applied == [] and w.consumer.seeks == []  # faust's own seek may bring them yet
    # Nothing more comes to partition 0; partition 1 brings a batch before each tick.
    for offset in range(3):
        await asyncio.sleep(PATIENCE_S * 1.5)
        await w.batch(1, offset)
        await w.tick()
    assert w.applied == [(1, 0), (1, 1), (1, 2)]
    # Sought once the patience passed, and again after each patience in which the seek brought
    # nothing (on the code before: never, so partition 0 waited for good).
    assert w.consumer.seeks == [(w.p0, 0)] * 3
    # The records come again from 0 and are applied: partition 0 is no longer sought.
    await w.batch(0, *range(6))
    await asyncio.sleep(PATIENCE_S * 1.5)
    await w.batch(1, 3)
    await w.tick()
    assert w.applied[3:] == [(0, o) for o in range(6)] + [(1, 3)] and w.consumer.seeks == [(w.p0, 0)] * 3


async def test_records_lost_before_the_agent_at_the_end_of_an_input_are_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The takeover seen: a node's XID events 0-80 applied, faust's read offset at 95, records
    81-95 never handed to the agent; nothing set aside, so only the broker's end shows them."""
    w = Worker(tmp_path, monkeypatch)
    w.topo.order.start(w.p0, 81)
    w.topo.order.start(w.p1, 0)
    w.ends = {w.p0: 96, w.p1: 0}
    await w.tick()  # the first look starts the partition's clock
    for offset in range(3):
        await asyncio.sleep(PATIENCE_S * 1.5)
        await w.batch(1, offset)  # the worker's own reports keep batches coming
        await w.tick()
    assert w.consumer.seeks == [(w.p0, 81)] * 3
    await w.batch(0, *range(81, 96))
    await asyncio.sleep(PATIENCE_S * 1.5)
    await w.tick()
    assert w.applied[3:] == [(0, o) for o in range(81, 96)] and w.consumer.seeks == [(w.p0, 81)] * 3
    # A partition catching up whose records keep coming (within the patience) is not sought.
    w.topo.order.patience_s = 30.0
    w.ends[w.p1] = 6
    for offset in range(3, 6):
        await w.batch(1, offset)
        await w.tick()
    assert w.consumer.seeks == [(w.p0, 81)] * 3


def test_the_worker_seeks_only_through_faust_s_consumer_thread() -> None:
    """faust's ``Consumer.seek`` runs aiokafka's seek in the caller's thread while faust's
    consumer thread may be inside ``fetched_records``: the fetcher crashed with a ``KeyError``
    (a survivor died 1 s after its takeover's recovery, tests/streams_kafka/test_failover.py, one
    loaded run). ``Consumer.seek_wait`` runs the seek in the consumer thread."""
    tree = ast.parse(Path(topology_module.__file__).read_text())
    seeks = [n.lineno for n in ast.walk(tree)
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "seek"]
    assert seeks == [], f"streams/topology.py calls .seek( at lines {seeks}"
