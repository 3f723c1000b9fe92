"""The agent's 60 s recording on a real H200 (bench/h200_probe.sh) is valid contract data."""

from __future__ import annotations

from pathlib import Path

from gpuwarden.contract import NodeSnapshot, TaskMetric, TaskMetrics, decode, unbatch

FIXTURE = Path(__file__).parent.parent / "fixtures" / "h200" / "h200-agent.jsonl"


def test_recorded_h200_run_decodes_and_shows_real_behaviour():
    wire = [decode(line) for line in FIXTURE.read_text().splitlines()]
    records = list(unbatch(wire))
    snaps = [r for r in records if isinstance(r, NodeSnapshot)]
    metrics = [r for r in records if isinstance(r, TaskMetric)]
    assert len(snaps) == 60 and [s.seq for s in snaps] == list(range(60))
    g = snaps[-1].gpus.rows()[0]
    assert g.name == "NVIDIA H200" and g.power_limit_w == 700 and g.clock_sm_max_mhz == 1980
    assert g.fan_pct is None and g.nvlink_up is None  # NotSupported on this board: null, never 0
    assert any(s.gpus.rows()[0].sm_active is not None for s in snaps)  # GPM on the slow cadence
    loaded = [s for s in snaps if s.processes]
    assert loaded and all(p.task == "h200_load.py" and p.user for s in loaded for p in s.processes.rows())
    assert max(s.gpus.rows()[0].power_w for s in loaded) > 2 * snaps[0].gpus.rows()[0].power_w  # power corroborates load
    assert len(metrics) == 252 and sum(type(r) is TaskMetrics for r in wire) == 50  # one batch a tick
    assert {m.kind for m in metrics} >= {"step", "checkpoint_begin", "checkpoint_end"}
    assert all(m.pid == loaded[0].processes.pid[0] for m in metrics)  # pid from SCM_CREDENTIALS
