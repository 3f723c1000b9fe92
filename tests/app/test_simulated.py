"""Simulated hardware never reaches a real receiver (issue #18, defect 6): simulated records say
so end to end, simulated nodes are named ``sim-…``, and only a receiver with
``accept_simulated: true`` gets their alerts."""

from __future__ import annotations

import json

import pytest

from gpuwarden.app.cli import build_parser
from gpuwarden.app.settings import validate_settings
from gpuwarden.app.standalone import SIMULATED_LOCAL, cmd_run
from gpuwarden.contract import AlertTransition, GpuEvent, NodeSnapshot, TaskMetric, decode, encode
from gpuwarden.producers.attrib import Attribution
from gpuwarden.producers.nvml import NvmlCollector
from gpuwarden.producers.simulator import Simulator, sim_node
from gpuwarden.streams.engine import Engine
from tests.fakes.http import FakePagerDuty
from tests.fakes.nvml import FakeGpu, FakeNvml

KEY = "0123456789abcdef0123456789abcdef"  # PagerDuty routing keys are 32 characters


def _run(tmp_path, monkeypatch, capsys, pd: FakePagerDuty, accept: bool | None) -> list[AlertTransition]:
    """``gpuwarden run --simulate xid-79`` with one PagerDuty receiver paging every critical alert."""
    monkeypatch.setenv("GW_PD_KEY", KEY)
    receiver = {"name": "pd", "pagerduty": {"routing_key": {"env": "GW_PD_KEY"}, "url": pd.base + "/v2/enqueue"}}
    if accept is not None:
        receiver["accept_simulated"] = accept
    settings = validate_settings({"spool": {"path": str(tmp_path / "s.db")}, "notify": {
        "receivers": [receiver], "team": "pd", "owners": {"default": "pd"},
        "escalation": [{"receivers": ["pd"]}], "drain_on_exit": "10s"}})
    args = build_parser().parse_args(["run", "--simulate", "xid-79", "--nodes", "1", "--gpus", "8",
                                      "--duration", "6m", "--json"])
    assert cmd_run(args, settings) == 0
    out = capsys.readouterr()
    if not accept:
        assert SIMULATED_LOCAL in out.err
    return [decode(line.encode(), AlertTransition) for line in out.out.splitlines()]


@pytest.mark.parametrize("accept", [None, False])
def test_a_simulated_run_pages_no_receiver_that_did_not_opt_in(tmp_path, monkeypatch, capsys, accept) -> None:
    with FakePagerDuty() as pd:
        alerts = _run(tmp_path, monkeypatch, capsys, pd, accept)
    assert any(t.tier.value == "critical" for t in alerts)  # the run did page-worthy things
    assert pd.requests == []


def test_a_receiver_that_opts_in_gets_them_marked_simulated(tmp_path, monkeypatch, capsys) -> None:
    with FakePagerDuty() as pd:
        alerts = _run(tmp_path, monkeypatch, capsys, pd, True)
    assert alerts and all(t.labels["simulated"] == "true" and t.labels["node"] == sim_node(0) for t in alerts)
    triggers = [r.json for r in pd.accepted if r.json["event_action"] == "trigger"]
    assert triggers and all(e["payload"]["custom_details"]["labels"]["simulated"] == "true" for e in triggers)
    assert all(e["payload"]["source"].startswith("sim-") for e in triggers)


def test_simulated_records_summaries_and_alerts_say_so() -> None:
    sim = Simulator("memory-leak", nodes=1, gpus=8, seed=0, start_ts=1_700_000_000.0, tick_s=10.0)
    records = list(sim.run(3600))
    kinds = {type(r) for r in records}
    assert {NodeSnapshot, GpuEvent, TaskMetric} <= kinds or {NodeSnapshot, TaskMetric} <= kinds
    assert all(r.simulated and r.node.startswith("sim-") for r in records)
    assert all(json.loads(encode(r))["simulated"] is True for r in records[:50])  # on the wire and the spool
    engine = Engine()
    out = engine.nodes.flush()
    for r in records:
        engine.nodes.process(r, out=out)
    assert out.summaries and all(s.simulated for s in out.summaries)
    assert out.transitions and all(t.labels.get("simulated") == "true" for t in out.transitions)


def test_records_read_from_nvml_are_never_simulated() -> None:
    clock = iter(range(1_700_000_000, 1_800_000_000)).__next__
    c = NvmlCollector(FakeNvml([FakeGpu(0), FakeGpu(1)]), node="gpu-box-1", slow_in_thread=False, gpm_interval_s=0,
                      clock=lambda: float(clock()),
                      attributor=lambda pid: Attribution(uid=1001, user="alice", task="llama", task_id="slurm-1"))
    records = [r for _ in range(3) for r in c.step()]
    assert records and not any(r.simulated for r in records)
    assert all(json.loads(encode(r))["simulated"] is False for r in records)
    engine = Engine()
    gone = GpuEvent(node="gpu-box-1", seq=99, boot_id=records[0].boot_id, ts=records[-1].ts, kind="gpu_lost",
                    source="nvml", gpu_index=1)
    fired = [t for r in [*records, gone] for t in engine.process(r)]
    assert fired and all("simulated" not in t.labels for t in fired)


@pytest.mark.parametrize("source", ["auto", "nvml"])
def test_the_agent_on_a_failing_nvml_is_an_error_not_a_simulation(monkeypatch, capsys, tmp_path, source) -> None:
    from gpuwarden.producers import nvml
    from gpuwarden.producers.agent import cmd_agent

    def broken() -> None:
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(nvml, "load_nvml", broken)
    settings = validate_settings({"agent": {"source": source}, "spool": {"path": str(tmp_path / "s.db")}})
    out = tmp_path / "records.jsonl"
    args = build_parser().parse_args(["agent", "--duration", "1m", "--output", str(out)])
    assert cmd_agent(args, settings) == 1
    assert "cannot open NVML (OSError: libnvidia-ml.so.1" in capsys.readouterr().err
    assert not out.exists() or out.read_text() == ""
