"""A rank held back by its PCIe link is named with the link's figures (job-straggler, issue #35).

Two sources the rule pack's authors did not write: the agent's NVML collector over a fake NVML whose
link values follow NVML's reference (the ``Curr`` calls give the link now, the ``Max`` calls the link
"possible with this device and system"), four such nodes through the engine; and the simulator's
``straggler-pcie`` scenario, in which every rank waits in the same collectives, so neither the slow
node's clock nor its tensor activity stands out.
"""

from __future__ import annotations

from functools import cache

import pytest

from gpuwarden.contract import AlertTransition, GpuEvent, NodeSnapshot, TaskSummary
from gpuwarden.producers.attrib import Attribution
from gpuwarden.producers.nvml import NvmlCollector
from gpuwarden.producers.simulator import PCIE_SLOW, sim_node
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.output import StageOutput
from gpuwarden.streams.rules import load_rules
from tests.fakes.nvml import FakeGpu, FakeNvml
from tests.streams.test_straggler import ONSET_S, RULE, T0, _engine_run, _firings

TRAINED_DOWN = "a PCIe link that trained down: Gen3 x8 where its peers run Gen5 x16 (12% of their bandwidth, " \
               "12% of what its GPU and slot allow)."


@cache
def _scenario() -> tuple[AlertTransition, ...]:
    return tuple(_engine_run("straggler-pcie", ONSET_S + 1800))


def test_the_simulated_node_whose_link_trained_down_is_named_with_its_link() -> None:
    trs = list(_scenario())
    fired = _firings(trs)
    assert [(t.labels["node"], t.labels["gpus"]) for t in fired] == [(sim_node(3), "0,1")]
    alert = fired[0]
    assert 0 <= alert.ts - (T0 + ONSET_S) <= 600
    v = alert.evidence.values
    assert v["clock_vs_peers"] == pytest.approx(1.0, abs=0.03)  # nothing but the link stands out
    assert v["tensor_vs_peers"] == pytest.approx(1.0, abs=0.05)
    assert (v["pcie_gen"], v["pcie_width"], v["peers_pcie_gen"], v["peers_pcie_width"]) == (3, 8, 5, 16)
    assert v["pcie_vs_peers"] == v["pcie_link_frac"] == 0.125
    assert v["step_time_rise"] == pytest.approx(PCIE_SLOW - 1, abs=0.06)
    assert alert.evidence.note == TRAINED_DOWN
    assert "nvidia-smi -q -d PCIE" in alert.action and "riser" in alert.action
    assert {t.labels["node"] for t in trs if t.rule == RULE} == {sim_node(3)}


def test_the_link_figures_come_only_with_the_link_cause() -> None:
    """The plain straggler (a clock held down) keeps its cause and shows no PCIe figures."""
    from tests.streams.test_straggler import _straggler_run

    alert = _firings(list(_straggler_run()))[0]
    assert "no slowdown reason reported" in (alert.evidence.note or "")
    assert not [k for k in alert.evidence.values if "pcie" in k]


def test_a_task_s_slowest_link_is_one_gpu_s_not_the_lowest_of_each() -> None:
    """GPU 0 at Gen3 x16 (15.8 GB/s), GPU 1 at Gen5 x8 (31.5 GB/s): the summary says Gen3 x16, not Gen3 x8."""
    gpus = [FakeGpu(0, util=95, pcie=(3, 16), processes=[(100, 1 << 30)]),
            FakeGpu(1, util=95, pcie=(5, 8), processes=[(101, 1 << 30)])]
    stage, out = NodeStage(load_rules(None), EngineConfig()), StageOutput([], [])
    for r in _node_records("n0", gpus, 0.0, 125.0):
        stage.process(r, out=out)
    s = _task(out.summaries)
    assert (s.stats["pcie_gen"], s.stats["pcie_width"]) == (3.0, 16.0)
    assert s.stats["pcie_link_frac"] == pytest.approx(0.25)  # Gen3 x16 of Gen5 x16


def _task(summaries: list[TaskSummary]) -> TaskSummary:
    return next(s for s in summaries if s.task == "llama")


def _node_records(node: str, gpus: list[FakeGpu], start: float, end: float) -> list[NodeSnapshot | GpuEvent]:
    """The agent's collector over a fake NVML, every 5 s of a fake clock from ``start`` to ``end``."""
    now = [T0 + start]
    attrib = Attribution(uid=1003, user="chen", task="llama", task_id="slurm-7")
    c = NvmlCollector(FakeNvml(gpus), node=node, slow_in_thread=False, gpm_interval_s=0, clock=lambda: now[0],
                      attributor=lambda pid: attrib)
    out: list = []
    while now[0] <= T0 + end:
        out += c.step()
        now[0] += 5.0
    return out


@pytest.mark.parametrize(("slow", "note"), [
    # NVML's reference: Max is what the GPU and its slot allow together; Curr the link now.
    (dict(pcie=(3, 8), pcie_max=(5, 16)), TRAINED_DOWN),
    # "an x16 device attached to an x8 system bus": max x8, and the link runs at it.
    (dict(pcie=(5, 8), pcie_max=(5, 8)), "a slower PCIe link: Gen5 x8 where its peers run Gen5 x16 (50% of their bandwidth)."),
    ({}, None),  # every link alike: quiet
], ids=["trained-down", "slot-limited", "alike"])
def test_the_agent_s_link_readings_name_the_node_through_the_engine(slow: dict, note: str | None) -> None:
    """Four nodes' collectors over a fake NVML, 2 GPUs each of one job, every GPU alike but one GPU
    of n3's link: n3 is named, with the cause its readings show."""
    records = []
    for n in range(4):
        gpus = [FakeGpu(i, util=95, processes=[(200 + 10 * n + i, 40 << 30)], **(slow if n == 3 and i == 0 else {}))
                for i in range(2)]
        records += _node_records(f"n{n}", gpus, 0.0, 900.0)
    records.sort(key=lambda r: (r.ts, r.node))
    engine = Engine()
    trs = engine.process_many(records) + engine.flush()
    fired = _firings(trs)
    if note is None:
        assert fired == []
        return
    assert [(t.labels["node"], t.labels["gpus"], t.labels["task"]) for t in fired] == [("n3", "0,1", "slurm-7")]
    assert fired[0].evidence.note == note
    assert fired[0].ts - T0 <= 600


def test_a_cause_s_shown_metric_is_checked_like_the_rule_s() -> None:
    from gpuwarden.streams.rules import RulesError, validate

    cause = {"when": {"threshold": {"metric": "pcie_vs_peers", "op": "<=", "value": 0.75}}, "summary": "c",
             "show": [{"metric": "pcie_genn"}]}
    rule = {"name": "x", "scope": "rank", "tier": "info", "summary": "s", "causes": [cause],
            "when": {"threshold": {"metric": "straggler", "op": ">=", "value": 1}}}
    with pytest.raises(RulesError, match=r"rules\[0\]\.causes\[0\]\.show\[0\]\.metric: unknown metric 'pcie_genn'"):
        validate({"rules": [rule]}, "t")
