"""The stage-1 → stage-2 watermark (streams/progress.py): what a partition reports, when, and
how stage 2's gate bounds partitions that are empty, silent, behind or not heard from."""

from __future__ import annotations

import math

from gpuwarden.contract import StageProgress, decode, encode
from gpuwarden.streams.progress import Gate, Reporter, is_progress, partition_watermark

LATENESS, SKEW = 300.0, 6 * 3600.0


def _p(partition: int, watermark: float | None, nodes: int = 1, catching_up: bool = False) -> StageProgress:
    return StageProgress(partition=partition, watermark=watermark, nodes=nodes, catching_up=catching_up)


def test_a_partition_is_as_far_as_its_slowest_live_node() -> None:
    assert partition_watermark([], False, LATENESS) is None
    assert partition_watermark([(-math.inf, 100.0)], False, LATENESS) is None  # all still buffered
    assert partition_watermark([(970.0, 1000.0), (940.0, 990.0)], False, LATENESS) == 940.0
    # Caught up, a node 10 min behind the partition's newest went silent: it does not hold it.
    assert partition_watermark([(970.0, 1000.0), (370.0, 400.0)], False, LATENESS) == 970.0
    # Catching up, it does (its records may just not be read yet).
    assert partition_watermark([(970.0, 1000.0), (370.0, 400.0)], True, LATENESS) == 370.0


def test_the_gate_is_the_slowest_partition_within_its_bound() -> None:
    gate = Gate(3, LATENESS, SKEW)
    gate.update(_p(0, 1000.0))
    assert gate.value == 1000.0 - SKEW  # 1 and 2 not heard from: as if catching up
    gate.update(_p(1, 900.0))
    assert gate.value == 1000.0 - SKEW  # 2 still unheard: held up to the skew
    assert gate.update(_p(2, None, nodes=0))  # empty and caught up: not waited for
    assert gate.value == 900.0
    gate.update(_p(1, 500.0))  # a worker that took 1 over restarts lower: marks only rise
    assert gate.value == 900.0
    gate.update(_p(0, 2000.0))
    assert gate.value == 2000.0 - LATENESS  # 1 caught up but silent: held at most the lateness
    gate.update(_p(1, 900.0, catching_up=True))
    assert gate.value == 900.0  # 1 catching up: waited for up to the skew


def test_nothing_passes_before_any_partition_reports_unless_all_are_empty() -> None:
    gate = Gate(2, LATENESS, SKEW)
    assert gate.value == -math.inf
    gate.update(_p(0, None, nodes=0))
    assert gate.value == -math.inf
    gate.update(_p(1, None, nodes=0))
    assert gate.value == math.inf


def test_reports_go_out_when_they_change_what_stage_2_may_release_and_every_resend() -> None:
    r = Reporter(60.0, resend_s=2.0)
    assert r.due(_p(0, 65.0), 0.0)
    assert not r.due(_p(0, 110.0), 0.5)  # same summary interval
    assert r.due(_p(0, 125.0), 0.6)  # the next one
    assert r.due(_p(0, 125.0, catching_up=True), 0.7)
    assert r.due(_p(1, 125.0), 0.7)  # per partition
    assert not r.due(_p(0, 125.0, catching_up=True), 1.0)
    assert r.due(_p(0, 125.0, catching_up=True), 2.8)  # resent
    r.forget()
    assert r.due(_p(0, 125.0, catching_up=True), 2.9)


def test_the_record_round_trips_and_is_told_apart_by_its_header() -> None:
    p = _p(3, 1234.5, nodes=7, catching_up=True)
    assert decode(encode(p), StageProgress) == p
    assert decode(encode(p)) == p  # any-kind decoding knows it too
    assert is_progress([("gw-progress", b"1")]) and not is_progress(None) and not is_progress([])
