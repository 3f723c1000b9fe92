"""Every window column holds what its name says: each is pinned to the input field it is made from.

For each input field, a snapshot (or task metric) that differs from a base one in that field
only must change exactly the columns made from it, to the values stated here (independently
of ``gpuwarden.streams.columns``), after the stage has closed the bucket: so two columns whose
sources were swapped (``power_frac`` and ``clock_frac``, say) fail, wherever the swap is.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.contract import GpuProcess, GpuSample, NodeSnapshot, TaskMetric
from gpuwarden.streams.columns import GPU_INDEX, NODE_INDEX, TASK_INDEX
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.output import StageOutput
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.summaries import GPU_MAX_STATS, GPU_MIN_STATS, GPU_STATS, LINK_STATS, TASK_STATS

T0 = 1_700_000_040.0  # a multiple of 60 s: a bucket (15 s) and a summary interval (60 s) start here
GIB = 1 << 30
CONFIG = EngineConfig(allowed_lateness=0)
BASE = {"util_gpu": 50.0, "mem_used_bytes": 40 * GIB, "mem_total_bytes": 80 * GIB, "temp_gpu_c": 60.0,
        "power_w": 300.0, "power_limit_w": 600.0, "power_default_limit_w": 600.0, "clock_sm_mhz": 1500,
        "clock_sm_max_mhz": 2000, "clock_event_reasons": 0, "ecc_volatile_uncorrected": 0, "remap_pending": False, "remap_failure": False,
        "tensor_active": 40.0, "sm_active": 60.0, "nvlink_down": 0, "pcie_gen": 5, "pcie_width": 16,
        "pcie_gen_max": 5, "pcie_width_max": 16}
BASE_ROW = {"util_gpu": 50.0, "mem_used_gib": 40.0, "mem_total_gib": 80.0, "temp_gpu_c": 60.0, "power_w": 300.0,
            "power_limit_w": 600.0, "power_default_limit_w": 600.0, "clock_sm_mhz": 1500, "clock_sm_max_mhz": 2000,
            "hw_slowdown": 0.0, "hw_thermal": 0.0, "power_brake": 0.0, "sw_thermal": 0.0, "sw_power_cap": 0.0,
            "capped": 0.0, "thermal_cap": 0.0, "cap_clock_loss": 0.0, "ecc_uncorrected": 0,
            "remap_pending": 0.0, "remap_failure": 0.0, "allocated": 1.0, "idle_allocated": 0.0, "present": 1.0,
            "mem_used_frac": 0.5, "headroom_gib": 40.0, "power_frac": 0.5, "clock_frac": 0.75,
            "temp_per_w": 0.2, "power_limit_frac": 1.0, "tensor_active": 40.0, "sm_active": 60.0,
            "nvlink_down": 0.0, "pcie_gen": 5.0, "pcie_width": 16.0, "pcie_link_frac": 1.0}
OWNED = [GpuProcess(pid=7, gpu_index=0, task_id="job-1", task="train", user="ann")]

#: A GpuSample field (or several) set to a new value -> every GPU column that then changes, and to what.
GPU_CASES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    ({"util_gpu": 3.0}, {"util_gpu": 3.0, "idle_allocated": 1.0}),
    ({"mem_used_bytes": 60 * GIB}, {"mem_used_gib": 60.0, "mem_used_frac": 0.75, "headroom_gib": 20.0}),
    ({"mem_total_bytes": 100 * GIB}, {"mem_total_gib": 100.0, "mem_used_frac": 0.4, "headroom_gib": 60.0}),
    ({"temp_gpu_c": 90.0}, {"temp_gpu_c": 90.0, "temp_per_w": 0.3}),
    ({"power_w": 400.0}, {"power_w": 400.0, "power_frac": 400 / 600, "temp_per_w": 0.15}),
    ({"power_limit_w": 500.0}, {"power_limit_w": 500.0, "power_frac": 0.6, "power_limit_frac": 500 / 600}),
    ({"power_default_limit_w": 750.0}, {"power_default_limit_w": 750.0, "power_limit_frac": 0.8}),
    ({"clock_sm_mhz": 1000}, {"clock_sm_mhz": 1000, "clock_frac": 0.5}),
    ({"clock_sm_max_mhz": 1600}, {"clock_sm_max_mhz": 1600, "clock_frac": 1500 / 1600}),
    # NVML's reason bits: each cap reason costs the clock below max (1500 of 2000 MHz: 25 %) ...
    ({"clock_event_reasons": 0x4}, {"sw_power_cap": 1.0, "capped": 1.0, "cap_clock_loss": 0.25}),
    ({"clock_event_reasons": 0x8}, {"hw_slowdown": 1.0, "capped": 1.0, "cap_clock_loss": 0.25}),
    ({"clock_event_reasons": 0x20}, {"sw_thermal": 1.0, "capped": 1.0, "thermal_cap": 1.0, "cap_clock_loss": 0.25}),
    ({"clock_event_reasons": 0x40}, {"hw_thermal": 1.0, "capped": 1.0, "thermal_cap": 1.0, "cap_clock_loss": 0.25}),
    ({"clock_event_reasons": 0x80}, {"power_brake": 1.0, "capped": 1.0, "cap_clock_loss": 0.25}),
    # ... and the others (idle 0x1, app clocks 0x2, sync boost 0x10, display 0x100) are no cap's cost.
    ({"clock_event_reasons": 0x1 | 0x2 | 0x10 | 0x100}, {}),
    ({"clock_event_reasons": 0x4, "clock_sm_mhz": 1000},
     {"clock_sm_mhz": 1000, "clock_frac": 0.5, "sw_power_cap": 1.0, "capped": 1.0, "cap_clock_loss": 0.5}),
    ({"ecc_volatile_uncorrected": 2}, {"ecc_uncorrected": 2}),
    ({"remap_pending": True}, {"remap_pending": 1.0}),
    ({"remap_failure": True}, {"remap_failure": 1.0}),
    ({"tensor_active": 70.0}, {"tensor_active": 70.0}),
    ({"sm_active": 90.0}, {"sm_active": 90.0}),
    ({"nvlink_down": 2}, {"nvlink_down": 2.0}),
    # PCIe GB/s per lane: Gen1-2 2.5 and 5 GT/s at 8b/10b, Gen3-5 8, 16, 32 GT/s at 128b/130b, Gen6 64 GT/s
    # with FLIT's 242 of 256 bytes (PCI-SIG); the link now over the most the GPU and its slot allow
    ({"pcie_gen": 3, "pcie_width": 8}, {"pcie_gen": 3.0, "pcie_width": 8.0, "pcie_link_frac": (8 * 8) / (32 * 16)}),
    ({"pcie_gen": 1, "pcie_gen_max": 2}, {"pcie_gen": 1.0, "pcie_link_frac": 0.5}),
    ({"pcie_gen_max": 6}, {"pcie_link_frac": (32 * 128 / 130) / (64 * 242 / 256)}),
    ({"pcie_width_max": 32}, {"pcie_link_frac": 0.5}),
    ({"pcie_width_max": None}, {"pcie_link_frac": None}),  # an agent that sends no maximum
    ({"processes": []}, {"allocated": 0.0}),
    ({"util_gpu": 3.0, "processes": []}, {"util_gpu": 3.0, "allocated": 0.0}),  # idle only when allocated
    ({"util_gpu": None, "mem_used_bytes": None, "temp_gpu_c": None},
     {"util_gpu": None, "mem_used_gib": None, "temp_gpu_c": None, "present": 0.0, "mem_used_frac": None,
      "headroom_gib": None, "temp_per_w": None}),
]


def _snapshot(seq: int, ts: float, fields: dict[str, Any]) -> NodeSnapshot:
    fields = {**BASE, **fields}
    processes = fields.pop("processes", OWNED)
    return NodeSnapshot.of(ts=ts, node="n1", seq=seq, boot_id="b", agent_version="t",
                           gpus=[GpuSample(index=0, uuid="GPU-0", **fields)], processes=processes)


def _step(ts: float, **times: float) -> TaskMetric:
    return TaskMetric(ts=ts, node="n1", task="train", task_id="job-1", kind="step", step=int(ts),
                      **{"step_time_s": 2.0, "data_wait_s": 0.5, "comm_s": 0.25, **times})


def _run(gpu: dict[str, Any], step: dict[str, float], until: float) -> tuple[NodeStage, StageOutput]:
    """Snapshots every 5 s and a step after each, from T0 to ``until``."""
    stage, out = NodeStage(load_rules(None), CONFIG), StageOutput([], [])
    for k in range(int((until - T0) // 5) + 1):
        stage.process(_snapshot(k, T0 + 5 * k, gpu), out=out)
        stage.process(_step(T0 + 5 * k + 1, **step), out=out)
    return stage, out


def _gpu_row(fields: dict[str, Any]) -> dict[str, Any]:
    stage, _ = _run(fields, {}, T0 + 15)  # the snapshot at T0 + 15 closes the first bucket
    st = stage.state("n1")
    assert st is not None
    row = st.gpus[0].win.latest_row()
    assert row is not None
    return {name: row[i] for name, i in GPU_INDEX.items()}


def test_base_gpu_row() -> None:
    assert _gpu_row({}) == pytest.approx(BASE_ROW)


@pytest.mark.parametrize(("fields", "changed"), GPU_CASES, ids=lambda v: ",".join(v) if isinstance(v, dict) else "")
def test_each_gpu_column_comes_from_its_source_field(fields: dict[str, Any], changed: dict[str, Any]) -> None:
    assert _gpu_row(fields) == pytest.approx({**BASE_ROW, **changed})


def test_every_gpu_column_is_pinned() -> None:
    assert set(BASE_ROW) == set(GPU_INDEX)
    assert set().union(*(changed for _, changed in GPU_CASES)) == set(GPU_INDEX)


#: A step TaskMetric field (or a GPU field) -> the task columns and task summary stats that change.
TASK_CASES: list[tuple[dict[str, float], dict[str, Any], dict[str, Any]]] = [
    ({"step_time_s": 4.0}, {}, {"step_time_s": 4.0, "data_wait_share": 0.125, "comm_share": 0.0625}),
    ({"data_wait_s": 1.0}, {}, {"data_wait_s": 1.0, "data_wait_share": 0.5}),
    ({"comm_s": 1.0}, {}, {"comm_s": 1.0, "comm_share": 0.5}),
    ({}, {"util_gpu": 80.0}, {"util_gpu": 80.0}),
]
BASE_TASK = {"step_time_s": 2.0, "data_wait_s": 0.5, "comm_s": 0.25, "util_gpu": 50.0, "data_wait_share": 0.25,
             "comm_share": 0.125}


@pytest.mark.parametrize(("step", "gpu", "changed"), [({}, {}, {}), *TASK_CASES])
def test_each_task_column_comes_from_its_source_field(step: dict, gpu: dict, changed: dict) -> None:
    stage, _ = _run(gpu, step, T0 + 15)
    st = stage.state("n1")
    assert st is not None
    row = st.tasks["job-1"].win.latest_row()
    assert row is not None
    assert {name: row[i] for name, i in TASK_INDEX.items()} == pytest.approx({**BASE_TASK, **changed})
    assert set(BASE_TASK) == set(TASK_INDEX) == set().union(*(c for *_, c in TASK_CASES))


def test_node_columns_count_present_and_missing_gpus() -> None:
    stage, _ = _run({"util_gpu": None, "mem_used_bytes": None, "temp_gpu_c": None}, {}, T0 + 15)
    st = stage.state("n1")
    assert st is not None
    row = st.win.latest_row()
    assert row is not None
    assert (row[NODE_INDEX.gpus_present], row[NODE_INDEX.gpus_missing]) == (0.0, 1.0)


BASE_STATS = {"util_gpu": 50.0, "step_time_s": 2.0, "data_wait_share": 0.25, "comm_share": 0.125,
              "power_w": 300.0, "temp_per_w": 0.2, "mem_peak_frac": 0.5, "cap_clock_loss": 0.0,
              "tensor_active": 40.0, "sm_active": 60.0, "thermal_cap": 0.0, "power_brake": 0.0, "hw_slowdown": 0.0, "remap_pending": 0.0,
              "ecc_uncorrected": 0.0, "nvlink_down": 0.0, "clock_frac": 0.75, "power_limit_frac": 1.0,
              "pcie_link_frac": 1.0, "pcie_gen": 5.0, "pcie_width": 16.0}
#: A step TaskMetric field or a GpuSample field -> the task summary stats that change.
STAT_CASES: list[tuple[dict[str, float], dict[str, Any], dict[str, Any]]] = [
    ({"step_time_s": 4.0}, {}, {"step_time_s": 4.0, "data_wait_share": 0.125, "comm_share": 0.0625}),
    ({"data_wait_s": 1.0}, {}, {"data_wait_share": 0.5}),
    ({"comm_s": 1.0}, {}, {"comm_share": 0.5}),
    ({}, {"util_gpu": 80.0}, {"util_gpu": 80.0}),
    ({}, {"power_w": 400.0}, {"power_w": 400.0, "temp_per_w": 0.15}),
    ({}, {"temp_gpu_c": 90.0}, {"temp_per_w": 0.3}),
    ({}, {"mem_used_bytes": 60 * GIB}, {"mem_peak_frac": 0.75}),
    ({}, {"mem_total_bytes": 100 * GIB}, {"mem_peak_frac": 0.4}),
    ({}, {"clock_event_reasons": 0x4}, {"cap_clock_loss": 0.25}),
    ({}, {"tensor_active": 70.0}, {"tensor_active": 70.0}),
    ({}, {"sm_active": 90.0}, {"sm_active": 90.0}),
    ({}, {"clock_event_reasons": 0x40}, {"cap_clock_loss": 0.25, "thermal_cap": 1.0}),
    ({}, {"clock_event_reasons": 0x80}, {"cap_clock_loss": 0.25, "power_brake": 1.0}),
    ({}, {"clock_event_reasons": 0x8}, {"cap_clock_loss": 0.25, "hw_slowdown": 1.0}),
    ({}, {"remap_pending": True}, {"remap_pending": 1.0}),
    ({}, {"ecc_volatile_uncorrected": 1}, {"ecc_uncorrected": 1.0}),
    ({}, {"nvlink_down": 1}, {"nvlink_down": 1.0}),
    ({}, {"clock_sm_mhz": 1000}, {"clock_frac": 0.5}),
    ({}, {"power_limit_w": 450.0}, {"power_limit_frac": 0.75}),
    ({}, {"pcie_gen": 4, "pcie_width": 8}, {"pcie_gen": 4.0, "pcie_width": 8.0, "pcie_link_frac": 0.25}),
]


@pytest.mark.parametrize(("step", "gpu", "changed"), [({}, {}, {}), *STAT_CASES])
def test_each_summary_stat_comes_from_its_source_field(step: dict, gpu: dict, changed: dict) -> None:
    _, out = _run(gpu, step, T0 + 60)  # the snapshot at T0 + 60 closes the first summary interval
    assert [s.ts for s in out.summaries] == [T0 + 60]
    assert out.summaries[0].stats == pytest.approx({**BASE_STATS, **changed})
    assert set(BASE_STATS) == {*TASK_STATS, *GPU_STATS, *GPU_MAX_STATS, *GPU_MIN_STATS, *LINK_STATS, "mem_peak_frac"} \
        == set().union(*(c for *_, c in STAT_CASES))
