"""Pure primitives: trend, baseline, alert lifecycle, windows, state codec."""

from __future__ import annotations

from collections import deque

import pytest

from gpuwarden.streams import statecodec
from gpuwarden.streams.alerts import AlertSlot, fingerprint, step
from gpuwarden.streams.baseline import band, median_mad
from gpuwarden.streams.trend import monotonicity, slope, time_to_full
from gpuwarden.streams.windows import TRIM_SLACK, BucketWindow, EventLog, Keep


def test_slope_of_a_line_and_undefined_cases() -> None:
    assert slope([0, 10, 20, 30], [1, 3, 5, 7]) == pytest.approx(0.2)
    assert slope([5], [1]) is None
    assert slope([5, 5], [1, 2]) is None


def test_monotonicity_sees_a_noisy_rise_but_not_noise() -> None:
    rise = [i * 0.1 + (0.5 if i % 2 else -0.5) for i in range(80)]
    flat = [(0.5 if i % 2 else -0.5) + (i % 7) * 0.01 for i in range(80)]
    assert monotonicity(rise) == 1.0
    assert monotonicity(flat) < 0.8
    assert monotonicity([1, 2]) is None


def test_time_to_full() -> None:
    assert time_to_full(90, 100, 0.5) == 20
    assert time_to_full(90, 100, -1) is None
    assert time_to_full(90, 100, None) is None


def test_median_mad_and_band_are_robust_to_an_outlier() -> None:
    med, mad, n = median_mad([10, 11, 9, 10, 1000])
    assert (med, mad, n) == (10, 1, 5)
    lo, hi = band(med, mad, mads=3)
    assert lo == pytest.approx(10 - 3 * 1.4826) and hi == pytest.approx(10 + 3 * 1.4826)
    assert band(10, 0, mads=3, min_delta=5) == (5, 15)


def test_for_and_keep_firing_for() -> None:
    s = AlertSlot("r")
    assert step(s, 0, True, 60, 120) is None      # pending
    assert step(s, 30, False, 60, 120) is None    # condition broke: pending reset
    assert step(s, 40, True, 60, 120) is None
    assert step(s, 100, True, 60, 120) == "firing"
    assert step(s, 150, False, 60, 120) is None   # flapping off: kept firing
    assert step(s, 160, True, 60, 120) is None
    assert step(s, 279, False, 60, 120) is None
    assert step(s, 280, False, 60, 120) == "resolved"


def test_fingerprint_is_stable_and_order_independent() -> None:
    a = fingerprint("r", {"node": "n1", "gpu": "3"})
    assert a == fingerprint("r", {"gpu": "3", "node": "n1"})
    assert a != fingerprint("r", {"node": "n1", "gpu": "4"})
    assert a != fingerprint("other", {"node": "n1", "gpu": "3"})


def test_bucket_window_means_maxes_and_series() -> None:
    w = BucketWindow(maxlen=3)
    w.add((1.0, None))
    w.add((3.0, 5.0))
    assert w.close(15, lambda m: [m[0] * 2]) == (15, [2.0, 5.0, 4.0], [3.0, 5.0])
    assert w.close(30) is None  # empty bucket: nothing closed
    for t in (30, 45, 60):
        w.add((float(t), None))
        w.close(t)
    assert w.series(0, 30) == ([45, 60], [45.0, 60.0])
    assert w.series(1, 0) == ([], [])  # bounded: the first bucket fell out of the deque


def test_a_window_with_keep_reads_and_dumps_as_one_trimmed_at_every_close() -> None:
    """With ``keep``, buckets past ``maxlen`` are dropped in bulk: what a rule can read (the
    ``keep`` newest) and what a dump writes are those of a window that drops one per close."""
    keep = Keep(means=(4, 2), maxes=(4, 0))
    w = BucketWindow(maxlen=4, keep=keep)
    for i in range(1, 3 * TRIM_SLACK):
        w.add((float(i), float(-i)))
        w.close(15.0 * i)
        newest = [15.0 * k for k in range(max(1, i - 3), i + 1)]
        assert w.series(0, 15.0 * i - 60) == (newest, [float(k) for k in range(max(1, i - 3), i + 1)])
        assert w.series(1, 15.0 * i - 30) == (newest[-2:], [float(-k) for k in range(max(1, i - 1), i + 1)])
        assert len(w.t) <= 4 + TRIM_SLACK
    state = w.__getstate__()
    back = BucketWindow(maxlen=4)
    back.__setstate__(state)
    assert back.t == newest and back.mean[0] == [float(k) for k in range(3 * TRIM_SLACK - 4, 3 * TRIM_SLACK)]


def test_event_log_counts_within_window_and_weights() -> None:
    log = EventLog(horizon_s=100)
    log.add(10, {"kind": "xid", "n": 1})
    log.add(50, {"kind": "xid", "n": 2})
    log.add(60, {"kind": "ecc_sbe", "n": 5})
    assert log.count(20, 60, lambda f: True) == 7
    assert log.count(20, 60, lambda f: True, frozenset({"xid"})) == 2
    log.expire(130)
    assert log.count(0, 200, lambda f: True) == 7


def test_state_codec_round_trip_is_byte_stable() -> None:
    w = BucketWindow(maxlen=4)
    w.add((1.0, float("inf")))
    w.close(15)
    state = {"w": w, "d": {3: "x", "a": deque([1, 2], maxlen=5)}, "f": float("-inf")}
    data = statecodec.dumps(state)
    back = statecodec.loads(data)
    assert statecodec.dumps(back) == data
    assert back["d"][3] == "x" and back["d"]["a"].maxlen == 5
    assert back["w"].series(0, 0) == ([15], [1.0])
