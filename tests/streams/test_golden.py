"""Every simulator scenario's engine output matches the recorded golden lines (tests/streams/golden.py)."""

from __future__ import annotations

from pathlib import Path

from tests.streams.golden import all_lines

GOLDEN = Path(__file__).parents[1] / "fixtures" / "engine_golden.jsonl"


def test_every_scenario_gives_the_recorded_transitions_summaries_and_state() -> None:
    want = GOLDEN.read_text().splitlines()
    got = list(all_lines())
    assert [g for g in got if g not in want][:3] == [] and got == want
