"""Growth primitives: Theil-Sen, the 30 s minima, the ladder of windows."""

from __future__ import annotations

import pytest

from gpuwarden.streams.growth import STEP_S, Minima, ladder, theil_sen


def test_theil_sen_ignores_a_spike_that_moves_least_squares() -> None:
    ts = [float(i) for i in range(10)]
    ys = [2.0 * t for t in ts]
    ys[8] += 100.0  # one staged checkpoint buffer
    assert theil_sen(ts, ys) == pytest.approx(2.0)


def test_theil_sen_thins_long_series_and_needs_two_times() -> None:
    ts = [float(i) for i in range(500)]
    assert theil_sen(ts, [3.0 * t + 1 for t in ts]) == pytest.approx(3.0)
    assert theil_sen([1.0, 1.0], [0.0, 5.0]) is None


def test_minima_keep_each_steps_lowest_bucket_and_forget_past_their_span() -> None:
    m = Minima(span=120.0)
    for end, v in ((15, 5.0), (30, 3.0), (45, 9.0), (60, 4.0), (75, None), (90, 1.0)):
        m.add(float(end), v, 15.0)
    assert m.v == [3.0, 4.0, 1.0]  # steps [0, 30), [30, 60), [60, 90): 7.5 and 22.5 -> 3; ...
    assert m.t == [22.5, 52.5, 82.5]
    m.add(400.0, 2.0, 15.0)
    assert m.t == [392.5] and m.v == [2.0]
    assert STEP_S == 30.0


def test_ladder_runs_from_hold_min_to_hold_max_in_whole_steps() -> None:
    rungs = ladder(180.0, 7200.0)
    assert rungs[0] == 180.0 and rungs[-1] == 7200.0
    assert all(b > a for a, b in zip(rungs, rungs[1:]))
    assert all(r % STEP_S == 0 for r in rungs)
    assert ladder(600.0, 600.0) == [600.0]
