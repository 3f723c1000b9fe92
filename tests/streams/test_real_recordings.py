"""The default rules on real recordings: what really happened there, nothing else loud (issue #18).

``tests/fixtures/h200/h200-agent.jsonl`` is the agent's 60 s recording on a real H200 of
``bench/h200_load.py``: 250 steps, each waiting 20 ms of its ~48 ms in the SDK's ``data()``
block, a checkpoint half-way, 1.6 GiB kept. As recorded it is too short for any windowed rule;
dilated 60x in event time (50 min: every windowed rule can judge it) the one true finding is the
data wait (42 % of each step); the slow growth (1.9 GiB/h dilated) is no leak, the checkpoint
no dip, and nothing is critical.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwarden.contract import NodeSnapshot, decode
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine

FIXTURE = Path(__file__).parent.parent / "fixtures" / "h200" / "h200-agent.jsonl"


def _records(dilate: float) -> list:
    records = [decode(line) for line in FIXTURE.read_text().splitlines()]
    t0 = min(r.ts for r in records)
    out = [r.model_copy(update={"ts": t0 + (r.ts - t0) * dilate}) for r in records]
    return sorted(out, key=lambda r: r.ts)


def _loud(dilate: float) -> list:
    records = _records(dilate)
    assert sum(isinstance(r, NodeSnapshot) for r in records) == 60
    engine = Engine(config=EngineConfig(observation_period=0))
    out = engine.process_many(records) + engine.flush()
    return [t for t in out if t.tier.value != "info"]


def test_h200_recording_as_recorded_raises_nothing_loud() -> None:
    assert _loud(1.0) == []


def test_h200_recording_dilated_finds_only_its_real_data_wait() -> None:
    loud = _loud(60.0)
    assert [(t.rule, t.state.value) for t in loud] == [("data-loader-starvation", "firing")]
    assert loud[0].evidence.values["data_wait_share_avg"] == pytest.approx(0.42, abs=0.02)
