"""Input records applied in offset order without gaps (streams/readorder.py)."""

from __future__ import annotations

from gpuwarden.streams.readorder import ReadOrder


def test_a_record_past_the_next_is_set_aside_and_the_partition_read_again_from_the_gap() -> None:
    """The seed-1 random-kill case: task metrics at 4,824 delivered where 4,250 was next."""
    order = ReadOrder()
    order.start("m:3", 4250)
    cut = order.batch()
    assert not cut.accept("m:3", 4824) and cut.gaps == {"m:3"}
    assert order.rewind("m:3", now=100.0) is None  # faust's seek after the rebalance may bring them
    assert order.rewind("m:3", now=109.0) is None
    assert order.rewind("m:3", now=110.0) == 4250  # still open after patience_s: seek back, once
    cut = order.batch()
    assert not cut.accept("m:3", 4825)  # fetched before the seek: still set aside,
    assert order.rewind("m:3", now=111.0) is None   # with no second seek
    cut = order.batch()
    assert cut.accept("m:3", 4250) and cut.accept("m:3", 4251)
    cut.applied(["m:3"])
    assert order.next["m:3"] == 4252
    assert order.rewind("m:3", now=112.0) is None  # a new gap waits its own patience


def test_a_batch_refused_moves_nothing() -> None:
    """A batch taken, then refused because a rebalance began: its records are still the next
    ones. Counted as read, a stale record past them (4,780) came first after the rebalance, was
    applied, and 4,250... were then skipped as applied (seed-1 random kills, 1 run in 3)."""
    order = ReadOrder()
    order.start("m:3", 4250)
    cut = order.batch()
    assert all(cut.accept("m:3", o) for o in range(4250, 4795))
    # refused: cut.applied is not called
    order.start("m:3", 4100)  # kept through the rebalance; committed offset 4100
    cut = order.batch()
    assert not cut.accept("m:3", 4780)  # stale, from a fetch before the rebalance: set aside
    cut = order.batch()
    assert all(cut.accept("m:3", o) for o in range(4100, 4300))  # read again from the commit


def test_records_read_again_are_accepted_and_do_not_move_the_next_offset_back() -> None:
    order = ReadOrder()
    order.start("s:0", 100)
    cut = order.batch()
    assert all(cut.accept("s:0", o) for o in range(100, 110))
    cut.applied(["s:0"])
    order.start("s:0", 95)  # kept through a rebalance: reading restarts at the committed offset
    cut = order.batch()
    assert all(cut.accept("s:0", o) for o in range(95, 112))
    cut.applied(["s:0"])
    assert order.next["s:0"] == 112


def test_moved_partitions_start_afresh_and_deleted_records_are_skipped() -> None:
    order = ReadOrder()
    order.start("s:0", 10)
    order.forget(["s:0"])
    order.start("s:0", 500)
    assert not order.batch().accept("s:0", 900)
    assert order.rewind("s:0", now=0.0) is None and order.rewind("s:0", now=10.0) == 500
    order.skip_to("s:0", 900)  # retention deleted 500..899 before they were read
    assert order.batch().accept("s:0", 900)


def test_a_failed_seek_is_asked_again_at_the_next_gap() -> None:
    order = ReadOrder()
    order.start("e:1", 7)
    assert not order.batch().accept("e:1", 9)
    assert order.rewind("e:1", now=0.0) is None and order.rewind("e:1", now=10.0) == 7
    order.rewind_failed("e:1")
    assert not order.batch().accept("e:1", 9)
    assert order.rewind("e:1", now=11.0) == 7


def test_a_seek_that_brought_nothing_is_made_again_after_patience() -> None:
    """faust's fetch loop foils a seek back: records of a fetch made before it, still being
    handed out, move faust's read offset past the gap again, and the records read again from
    the seek's offset are then dropped by faust as below it. Seen after a takeover in the
    failover test (1 run in 7): eight partitions sought back at once, then nothing applied for
    70 s. A gap still open ``patience_s`` after its seek is sought again, also when nothing
    more comes to the partition (asked with the broker's end offsets, :meth:`stalled`)."""
    order = ReadOrder()
    order.start("s:2", 300)
    assert not order.batch().accept("s:2", 340)
    order.arrived(["s:2"], now=0.0)
    assert order.rewind("s:2", now=0.0) is None
    assert order.stalled({"s:2": 345}, now=5.0) == set()  # records came 5 s ago
    assert order.stalled({"s:2": 345}, now=10.0) == {"s:2"}
    assert order.rewind("s:2", now=10.0) == 300
    assert not order.batch().accept("s:2", 341)  # handed out after the seek: it was foiled
    order.arrived(["s:2"], now=10.5)
    assert order.rewind("s:2", now=19.0) is None and order.stalled({"s:2": 345}, now=19.0) == set()
    assert order.stalled({"s:2": 345}, now=20.5) == {"s:2"}  # nothing for patience_s: again
    assert order.rewind("s:2", now=20.5) == 300
    assert order.rewind("s:2", now=21.0) is None  # under way
    cut = order.batch()
    assert all(cut.accept("s:2", o) for o in range(300, 345))
    cut.applied(["s:2"])
    assert order.stalled({"s:2": 345}, now=100.0) == set() and order.rewind("s:2", now=100.0) is None


def test_records_on_the_broker_that_never_came_are_sought() -> None:
    """Nothing set aside, but the broker's end lies past the next record to apply and nothing
    came for ``patience_s``: records faust handed on never reached the agent (a takeover's
    XID events 81-95 of 96). The partition's clock starts when it is first asked about."""
    order = ReadOrder()
    order.start("e:3", 81)
    order.start("s:3", 500)
    assert order.stalled({"e:3": 96, "s:3": 500}, now=0.0) == set()
    assert order.stalled({"e:3": 96, "s:3": 500}, now=9.0) == set()
    assert order.stalled({"e:3": 96, "s:3": 500}, now=10.0) == {"e:3"}  # s:3 is at its end
    assert order.rewind("e:3", now=10.0) == 81
    assert order.stalled({"e:3": 96}, now=15.0) == {"e:3"} and order.rewind("e:3", now=15.0) is None
    cut = order.batch()
    assert all(cut.accept("e:3", o) for o in range(81, 96))
    cut.applied(["e:3"])
    order.arrived(["e:3"], now=16.0)
    assert order.stalled({"e:3": 96}, now=60.0) == set()
    order.forget(["e:3"])
    order.start("e:3", 96)
    assert order.stalled({"e:3": 120}, now=61.0) == set()  # moved and back: a fresh clock
