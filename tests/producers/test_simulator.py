"""The simulator: deterministic, valid contract records, each scenario's signature."""

from __future__ import annotations

import pytest

from gpuwarden import clocks
from gpuwarden.contract import (EventKind, GpuEvent, NodeSnapshot, TaskMetric, TaskMetricKind, batch_task_metrics,
                                decode, encode)
from gpuwarden.producers.events import normalize_bus_id, parse_kmsg_line
from gpuwarden.producers.gpumodels import bus_id
from gpuwarden.producers.simulator import FAULTS, MIXED_FAULTS, SCENARIOS, Simulator, sim_node
from gpuwarden.producers.source import Source

T0 = 1_700_000_000.0


def records(scenario, seconds: float, **kw):
    return list(Simulator(scenario, start_ts=T0, **kw).run(seconds))


def proc_mem(recs, node: str, gpu: int) -> list[tuple[float, int]]:
    out = []
    for r in recs:
        if isinstance(r, NodeSnapshot) and r.node == node:
            out += [(r.ts, p.used_memory_bytes) for p in r.processes.rows() if p.gpu_index == gpu]
    return out


@pytest.fixture(scope="module")
def mixed():
    return records("mixed", 600, nodes=2, gpus=8)


def test_satisfies_source_protocol_and_ticks():
    sim = Simulator("healthy", start_ts=T0, tick_s=15)
    assert isinstance(sim, Source)
    first = sim.step()
    assert sim.ts == T0 + 15
    assert [r.ts for r in first] == sorted(r.ts for r in first)
    assert all(T0 <= r.ts < T0 + 15 for r in first)


def test_same_seed_same_records_other_seed_differs():
    a = [encode(r) for r in records("mixed", 120, nodes=2, gpus=4, seed=7)]
    b = [encode(r) for r in records("mixed", 120, nodes=2, gpus=4, seed=7)]
    c = [encode(r) for r in records("mixed", 120, nodes=2, gpus=4, seed=8)]
    assert a == b
    assert a != c


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_scenario_emits_valid_contract_records(name):
    recs = records(name, 400, nodes=1, gpus=8, tick_s=5)
    for r in batch_task_metrics(recs):  # as the agent publishes them
        assert decode(encode(r)) == r
    snaps = [r for r in recs if isinstance(r, NodeSnapshot) and r.node == sim_node(0)]  # gpus-unused adds a node
    assert len(snaps) == 80 and [s.seq for s in snaps] == list(range(80))
    assert SCENARIOS[name].expected


def test_unknown_scenario_is_refused():
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        Simulator("nope", start_ts=T0)


def test_h200_limits_and_unsupported_fields_are_null():
    snap = next(r for r in records("healthy", 1) if isinstance(r, NodeSnapshot))
    g = snap.gpus.rows()[0]
    assert g.name == "NVIDIA H200" and g.mem_total_bytes == 143771 << 20
    assert g.power_limit_w == 700 and g.clock_sm_max_mhz == 1980
    assert g.fan_pct is None  # SXM boards have no fan reading
    a100 = next(r for r in records("healthy", 1, gpu_model="A100") if isinstance(r, NodeSnapshot))
    assert a100.gpus.rows()[0].sm_active is None  # no GPM before Hopper
    assert all(p.user and p.uid and p.task and p.task_id for p in snap.processes.rows())


def test_healthy_memory_drops_after_checkpoint_but_leak_does_not():
    # sd-finetune on sim-node-00 gpu 4 checkpoints every 20 min for 30 s.
    healthy = records("healthy", 1500, tick_s=5)
    leak = records("memory-leak", 1500, tick_s=5)
    for recs, released in ((healthy, True), (leak, False)):
        end = next(r.ts for r in recs if isinstance(r, TaskMetric)
                   and r.kind == TaskMetricKind.CHECKPOINT_END and r.task == "sd-finetune")
        mem = proc_mem(recs, "sim-node-00", 4)
        during = max(m for t, m in mem if end - 30 <= t < end)
        after = [m for t, m in mem if end < t <= end + 60]
        assert (max(after) < during) == released
    leak_mem = [m for t, m in proc_mem(leak, "sim-node-00", 4) if t >= T0 + 240]
    assert leak_mem[-1] - leak_mem[0] > 20 * (200 << 20)  # >= 200 MiB/min for ~21 min
    healthy_mem = [m for t, m in proc_mem(healthy, "sim-node-00", 4) if t >= T0 + 240]
    assert max(healthy_mem) - min(healthy_mem) < 0.04 * (143771 << 20)


def test_mixed_covers_every_fault_signature(mixed):
    check_mixed(mixed)


def check_mixed(mixed):
    """Every fault scenario's signature in 10 min of ``mixed`` on 2 nodes x 8 GPUs from T0."""
    sim = Simulator("mixed", nodes=2, gpus=8, start_ts=T0)
    where = sim.placement
    assert set(where) == set(MIXED_FAULTS)
    single = [where[f] for f in MIXED_FAULTS if SCENARIOS[f].placement == "single"]
    assert len(set(single)) == len(single)  # job faults each on their own GPU
    events = [r for r in mixed if isinstance(r, GpuEvent)]
    snaps = [r for r in mixed if isinstance(r, NodeSnapshot)]
    metrics = [r for r in mixed if isinstance(r, TaskMetric)]

    def gpu_events(fault, kind):
        n, g = where[fault]
        return [e for e in events if e.node == sim_node(n) and e.gpu_index == g and e.kind == kind]

    xid79 = gpu_events("xid-79", EventKind.XID)
    assert [e.code for e in xid79] == [79] and xid79[0].catalogue.severity == "fatal"
    assert "fallen off the bus" in xid79[0].message and xid79[0].ts >= T0 + 180
    assert gpu_events("xid-79", EventKind.GPU_LOST)
    n, g = where["xid-79"]
    last = [s for s in snaps if s.node == sim_node(n)][-1]
    assert last.gpus.rows()[g].util_gpu is None and last.gpus.rows()[g].mem_used_bytes is None
    assert not [p for p in last.processes.rows() if p.gpu_index == g]

    assert [e.code for e in gpu_events("ecc-dbe", EventKind.XID)] == [48]
    assert gpu_events("ecc-dbe", EventKind.ECC_DBE)
    n, g = where["ecc-dbe"]
    assert [s for s in snaps if s.node == sim_node(n)][-1].gpus.rows()[g].ecc_volatile_uncorrected == 1
    assert [e.code for e in gpu_events("row-remap-pending", EventKind.XID)] == [63]
    assert gpu_events("row-remap-pending", EventKind.ECC_SBE)
    assert any(m.kind == TaskMetricKind.EXIT and m.exit_code == 1 for m in metrics)

    def gpu_series(fault, attr):
        n, g = where[fault]
        return [(s.ts, getattr(s.gpus.rows()[g], attr)) for s in snaps if s.node == sim_node(n)]

    reasons = gpu_series("thermal-throttle", "clock_event_reasons")
    assert any(v & clocks.HW_THERMAL for _, v in reasons)
    assert not any(v & clocks.HW_THERMAL for ts, v in reasons if ts < T0 + 180)  # before the onset
    temps = dict(gpu_series("thermal-throttle", "temp_gpu_c"))
    powers = dict(gpu_series("thermal-throttle", "power_w"))
    assert temps[T0 + 420] - temps[T0 + 240] >= 12  # rising at constant power before the throttle
    assert abs(powers[T0 + 420] - powers[T0 + 240]) < 40
    assert any(v & clocks.HW_POWER_BRAKE for _, v in gpu_series("power-cap", "clock_event_reasons"))

    idle = [v for t, v in gpu_series("idle-allocated", "util_gpu") if t > T0 + 200]
    assert max(idle) <= 2
    n, g = where["idle-allocated"]
    assert all([p for p in s.processes.rows() if p.gpu_index == g] for s in snaps if s.node == sim_node(n))

    leak = [m for t, m in proc_mem(mixed, *(sim_node(where["memory-leak"][0]), where["memory-leak"][1]))
            if t > T0 + 240]
    assert leak[-1] - leak[0] > 1 << 30

    def share(task_id, field):
        steps = [m for m in metrics if m.kind == "step" and m.task_id == task_id]
        early = [getattr(m, field) / m.step_time_s for m in steps if m.ts < T0 + 170]
        late = [getattr(m, field) / m.step_time_s for m in steps if m.ts > T0 + 200]
        return sum(early) / len(early), sum(late) / len(late)

    llama = next(p.task_id for p in snaps[0].processes.rows() if p.task == "llama-pretrain")
    assert share(llama, "comm_s") == pytest.approx((0.12, 0.45), abs=0.02)
    n, g = where["dataloader-starvation"]
    starving = next(p.task_id for s in snaps if s.node == sim_node(n) for p in s.processes.rows() if p.gpu_index == g)
    early, late = share(starving, "data_wait_s")
    assert early < 0.1 and late == pytest.approx(0.55, abs=0.02)
    drivers = {s.node: s.driver_version for s in snaps}
    assert drivers["sim-node-00"] != drivers["sim-node-01"]
    assert {m.kind for m in metrics} >= {"step", "throughput", "ttft", "latency", "exit"}
    assert len({p.user for s in snaps for p in s.processes.rows()}) >= 4


def _xids(recs, node="sim-node-00"):
    return [(r.ts - T0, r.gpu_index, r.code) for r in recs
            if isinstance(r, GpuEvent) and r.kind == EventKind.XID and r.node == node]


def _task_ids(recs, gpu, node="sim-node-00"):
    return list(dict.fromkeys(p.task_id for r in recs if isinstance(r, NodeSnapshot) and r.node == node
                              for p in r.processes.rows() if p.gpu_index == gpu))


def test_mixed_leaves_out_the_faults_that_would_erase_others():
    assert set(FAULTS) - set(MIXED_FAULTS) == {"xid-app-error", "xid-node-repeat", "driver-error",
                                               "power-limit-lowered", "straggler", "multinode-checkpoints",
                                               "pipeline-parallel", "xid-154", "tensor-fallback", "straggler-pcie"}
    assert set(Simulator("mixed", nodes=2, gpus=8, start_ts=T0).placement) == set(MIXED_FAULTS)


def test_xid_app_error_fails_the_job_twice_then_leaves_the_gpu_empty():
    recs = records("xid-app-error", 900)
    assert _xids(recs) == [(180.5, 4, 13), (180.5, 4, 31), (480.5, 4, 31)]
    xid13 = next(r for r in recs if isinstance(r, GpuEvent) and r.code == 13)
    assert xid13.catalogue.action == "RESTART_APP" and "Graphics" in xid13.message
    exits = [m for m in recs if isinstance(m, TaskMetric) and m.kind == TaskMetricKind.EXIT]
    assert [(m.ts - T0, m.exit_code) for m in exits] == [(180.25, 1), (480.25, 1)]
    assert "illegal memory access" in exits[0].message
    assert len(_task_ids(recs, 4)) == 2  # requeued once with a new task id, then not again
    last = [r for r in recs if isinstance(r, NodeSnapshot)][-1]
    assert not [p for p in last.processes.rows() if p.gpu_index == 4] and last.gpus.rows()[4].util_gpu is not None
    for ev in (r for r in recs if isinstance(r, GpuEvent) and r.kind == EventKind.XID):
        parsed = parse_kmsg_line(ev.message, ev.ts)  # the agent would read the same line
        assert (parsed.code, parsed.pci_bus_id) == (ev.code, ev.pci_bus_id)


def test_xid_node_repeat_hits_two_gpus_of_one_node_twice():
    recs = records("xid-node-repeat", 900, nodes=2)
    assert _xids(recs) == [(180.5, 3, 74), (180.5, 2, 74), (480.5, 3, 74), (480.5, 2, 74)]
    assert _xids(recs, "sim-node-01") == []
    assert next(r for r in recs if isinstance(r, GpuEvent)).catalogue.action == "WORKFLOW_NVLINK_ERR"
    assert len(_task_ids(recs, 3)) == 2 and len(_task_ids(recs, 0, "sim-node-01")) == 2  # the whole job
    exits = [m for m in recs if isinstance(m, TaskMetric) and m.kind == TaskMetricKind.EXIT]
    assert [m.ts - T0 for m in exits] == [180.25, 480.25] and "NCCL" in exits[0].message


def test_driver_error_reports_kernel_log_lines_then_the_gpu_gives_no_readings():
    recs = records("driver-error", 600)
    driver = [r for r in recs if isinstance(r, GpuEvent) and r.kind == EventKind.DRIVER]
    assert [(r.ts - T0, r.gpu_index) for r in driver] == [(180.5, 4), (180.5, 4)]
    assert driver[0].message == f"NVRM: GPU {bus_id(4)}: RmInitAdapter failed! (0x26:0x65:1457)"
    assert all(r.pci_bus_id == normalize_bus_id(bus_id(4)) and r.code is None for r in driver)
    assert "rm_init_adapter failed, device minor number 4" in driver[1].message
    assert not [r for r in recs if isinstance(r, GpuEvent) and r.kind != EventKind.DRIVER]
    snaps = [r for r in recs if isinstance(r, NodeSnapshot)]
    assert snaps[-1].gpus.rows()[4].util_gpu is None and snaps[-1].gpus.rows()[4].mem_used_bytes is None
    assert snaps[179].gpus.rows()[4].util_gpu is not None
    assert any(m.kind == TaskMetricKind.EXIT and m.exit_code == 1 for m in recs if isinstance(m, TaskMetric))


def test_power_limit_lowered_caps_the_target_gpu_at_its_new_limit_with_its_default_reported():
    sim = Simulator("power-limit-lowered", start_ts=T0, tick_s=5)
    n, g = sim.placement["power-limit-lowered"]
    rows = [(s.ts, s.gpus.rows()[g]) for s in sim.run(600) if isinstance(s, NodeSnapshot)]
    before = [x for ts, x in rows if ts < T0 + 180]
    after = [x for ts, x in rows if ts >= T0 + 180 and x.clock_event_reasons & clocks.SW_POWER_CAP]
    assert {x.power_limit_w for x in before} == {700} and {x.power_default_limit_w for x in before} == {700}
    assert len(after) > 0.5 * len([ts for ts, _ in rows if ts >= T0 + 180])
    assert {x.power_limit_w for x in after} == {420} and {x.power_default_limit_w for x in after} == {700}
    assert all(x.power_w <= 420 and x.clock_sm_mhz <= 0.8 * x.clock_sm_max_mhz for x in after)
