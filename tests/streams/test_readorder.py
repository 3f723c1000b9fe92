"""Input records applied in offset order without gaps (streams/readorder.py)."""

from __future__ import annotations

from gpuwarden.streams.readorder import ReadOrder


def test_a_record_past_the_next_is_set_aside_and_the_partition_read_again_from_the_gap() -> None:
    """The seed-1 random-kill case: task metrics at 4,824 delivered where 4,250 was next."""
    order = ReadOrder()
    order.start("m:3", 4250)
    assert not order.accept("m:3", 4824)
    assert order.rewind("m:3") == 4250
    assert not order.accept("m:3", 4825)  # fetched before the seek: still set aside,
    assert order.rewind("m:3") is None    # with no second seek
    assert order.accept("m:3", 4250) and order.accept("m:3", 4251)
    assert order.next["m:3"] == 4252


def test_records_read_again_are_accepted_and_do_not_move_the_next_offset_back() -> None:
    order = ReadOrder()
    order.start("s:0", 100)
    assert all(order.accept("s:0", o) for o in range(100, 110))
    order.start("s:0", 95)  # kept through a rebalance: reading restarts at the committed offset
    assert all(order.accept("s:0", o) for o in range(95, 112))
    assert order.next["s:0"] == 112


def test_moved_partitions_start_afresh_and_deleted_records_are_skipped() -> None:
    order = ReadOrder()
    order.start("s:0", 10)
    assert order.accept("s:0", 10)
    order.forget(["s:0"])
    order.start("s:0", 500)
    assert not order.accept("s:0", 900)
    assert order.rewind("s:0") == 500
    order.skip_to("s:0", 900)  # retention deleted 500..899 before they were read
    assert order.accept("s:0", 900)


def test_a_failed_seek_is_asked_again_at_the_next_gap() -> None:
    order = ReadOrder()
    order.start("e:1", 7)
    assert not order.accept("e:1", 9)
    assert order.rewind("e:1") == 7
    order.rewind_failed("e:1")
    assert not order.accept("e:1", 9)
    assert order.rewind("e:1") == 7
