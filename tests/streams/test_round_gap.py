"""When the worker's loop holds its next fetch for ``ROUND_GAP_S`` (runtime.drained): only after a
fetch that took all the inputs held. A catch-up's fetch answers are short too (cut at
``FETCH_BYTES`` a partition, or a partition paused by pacing), and holding those cost a 2 h
backlog 2-5 s of its catch-up (bench/worker_memory.py); the earlier rule (``0 < n < asked``)
held them all."""

from __future__ import annotations

from aiokafka import TopicPartition

from gpuwarden.streams.runtime import drained

A, B = TopicPartition("p.gpu.samples", 0), TopicPartition("p.task.metrics", 0)


def test_a_short_fetch_with_nothing_left_is_held() -> None:
    assert drained(40, 5000, {A: 100, B: 7}, {A: 100, B: 7}.get)


def test_a_short_fetch_with_records_left_on_any_input_is_a_catch_up() -> None:
    assert not drained(40, 5000, {A: 100, B: 7}, {A: 100, B: 9}.get)
    assert not drained(4999, 5000, {A: 100, B: 7}, {A: 350, B: 7}.get)


def test_a_full_or_empty_fetch_is_never_held() -> None:
    assert not drained(5000, 5000, {A: 100}, {A: 100}.get)
    assert not drained(0, 5000, {A: 100}, {A: 100}.get)


def test_an_input_no_fetch_answered_yet_does_not_count_as_behind() -> None:
    """Its position was just set (a restore, a seek): the next fetch answer says where its end is."""
    assert drained(40, 5000, {A: 100, B: 0}, {A: 100}.get)
