"""A task's source inputs are read at one pace of event time while they catch up (streams/pacing.py)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuwarden.streams.pacing import AHEAD_S, STALL_S, Pacing


@dataclass
class Rec:
    timestamp: int  # ms, as aiokafka's ConsumerRecord


def read(p: Pacing, **last_s: float) -> None:
    p.read({tp: [Rec(0), Rec(int(ts * 1000))] for tp, ts in last_s.items()})


def test_an_input_ahead_of_the_slowest_lagging_one_waits_until_it_catches_up():
    p = Pacing()
    read(p, samples=1000.0, metrics=1000.0 + AHEAD_S + 60)
    assert p.plan(["samples", "metrics"], waited=0.0) == ({"metrics"}, set())
    assert p.plan(["samples", "metrics"], waited=1.0) == (set(), set())  # still paused, nothing new
    read(p, samples=1030.0)
    assert p.plan(["samples", "metrics"], waited=2.0) == (set(), set())  # 30 s closer, still too far
    read(p, samples=1060.0)
    assert p.plan(["samples", "metrics"], waited=3.0) == (set(), {"metrics"})


def test_an_input_not_read_yet_holds_the_others_and_one_input_left_is_never_paused():
    p = Pacing()
    read(p, samples=50.0)
    assert p.plan(["samples", "events"], waited=0.0) == ({"samples"}, set())  # events: nothing read yet
    assert p.plan(["samples"], waited=1.0) == (set(), {"samples"})  # events caught up: nothing to pace


def test_a_laggard_that_gives_nothing_for_a_while_stops_the_pacing_until_it_moves():
    p = Pacing()
    read(p, samples=0.0, metrics=AHEAD_S * 3)
    assert p.plan(["samples", "metrics"], waited=0.0) == ({"metrics"}, set())
    assert p.plan(["samples", "metrics"], waited=STALL_S) == (set(), {"metrics"})  # an open transaction, say
    assert p.plan(["samples", "metrics"], waited=STALL_S + 1) == (set(), set())
    read(p, samples=1.0)
    assert p.plan(["samples", "metrics"], waited=STALL_S + 2) == ({"metrics"}, set())
