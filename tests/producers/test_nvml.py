"""NVML-to-contract mapping with a fake NVML module: values, NotSupported, GPU lost, MIG, GPM."""

from __future__ import annotations

from gpuwarden.contract import EventKind, GpuEvent, NodeSnapshot, decode, encode
from gpuwarden.producers.attrib import Attribution
from tests.fakes.nvml import FakeGpu, FakeNvml
from gpuwarden.producers.nvml import NvmlCollector


def collector(gpus, **kw):
    nv = FakeNvml(gpus)
    clock = iter(range(1_700_000_000, 1_800_000_000)).__next__
    c = NvmlCollector(nv, node="n1", slow_in_thread=False, gpm_interval_s=0, clock=lambda: float(clock()),
                      attributor=lambda pid: Attribution(uid=1001, user="alice", task="llama", task_id="slurm-1"),
                      **kw)
    return nv, c


def split(records):
    snaps = [r for r in records if isinstance(r, NodeSnapshot)]
    return snaps[0], [r for r in records if isinstance(r, GpuEvent)]


def test_every_field_mapped_with_units():
    nv, c = collector([FakeGpu(0, processes=[(4242, 30 << 30)])])
    snap, events = split(c.step())
    g = snap.gpus.rows()[0]
    assert (g.util_gpu, g.util_memory, g.temp_gpu_c, g.temp_memory_c) == (37, 9, 41, 47)
    assert g.power_w == 120.91 and g.power_limit_w == 700 and g.energy_mj == 2414713
    assert g.power_default_limit_w == 700
    assert (g.clock_sm_mhz, g.clock_mem_mhz, g.clock_sm_max_mhz) == (1980, 3201, 1980)
    assert g.clock_event_reasons == 4 and g.clock_event_names == ["sw_power_cap"]
    assert g.mem_total_bytes == 143771 << 20 and g.mem_reserved_bytes is not None
    assert (g.ecc_aggregate_corrected, g.ecc_volatile_uncorrected) == (2, 0)
    assert (g.remap_pending, g.remap_failure, g.remapped_rows_corrected) == (False, False, 0)
    assert (g.pcie_gen, g.pcie_width, g.pcie_replay_counter, g.pstate) == (5, 16, 0, 0)
    assert (g.sm_active, g.sm_occupancy, g.tensor_active, g.dram_active) == (81.5, 40.25, 55.0, 33.0)
    assert g.mig_mode is False and g.name == "NVIDIA H200"
    assert snap.driver_version == "580.159.04" and snap.cuda_version == "13.0"
    p = snap.processes.rows()[0]
    assert (p.pid, p.gpu_index, p.used_memory_bytes, p.user, p.task) == (4242, 0, 30 << 30, "alice", "llama")
    assert events == []
    assert decode(encode(snap)) == snap
    assert nv.calls["nvmlDeviceGetMaxClockInfo"] == 1  # static: read once
    c.step()
    assert nv.calls["nvmlDeviceGetMaxClockInfo"] == 1


def test_pcie_link_now_and_the_widest_its_gpu_and_slot_allow():
    """NVML's reference: the Curr calls give the link now, the Max calls the link "possible with this
    device and system" (a Gen2 device on a Gen1 bus reports Gen1). A GPU whose link trained down to Gen3
    x8 in a Gen5 x16 slot, one in a Gen4 slot at its best, a driver without the Max calls (null)."""
    gpus = [FakeGpu(0, pcie=(3, 8), pcie_max=(5, 16)), FakeGpu(1, pcie=(4, 16), pcie_max=(4, 16)),
            FakeGpu(2, unsupported={"nvmlDeviceGetMaxPcieLinkGeneration", "nvmlDeviceGetMaxPcieLinkWidth"})]
    nv, c = collector(gpus)
    rows = split(c.step())[0].gpus.rows()
    assert [(g.pcie_gen, g.pcie_width, g.pcie_gen_max, g.pcie_width_max) for g in rows] == \
        [(3, 8, 5, 16), (4, 16, 4, 16), (5, 16, None, None)]
    c.step()
    assert nv.calls["nvmlDeviceGetMaxPcieLinkGeneration"] == 3  # static: once per GPU


def test_not_supported_gives_null_never_zero_or_error():
    gpu = FakeGpu(0, unsupported={"nvmlDeviceGetFanSpeed", "nvmlDeviceGetNvLinkState",
                                  "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetRemappedRows",
                                  "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetTotalEccErrors"}, gpm=False)
    _, c = collector([gpu])
    g = split(c.step())[0].gpus.rows()[0]
    assert g.fan_pct is None and g.nvlink_up is None and g.nvlink_down is None
    assert g.energy_mj is None and g.remap_pending is None and g.pcie_replay_counter is None
    assert g.ecc_volatile_corrected is None and g.sm_active is None
    assert g.util_gpu == 37  # the rest still sampled


def test_slow_set_only_on_its_cadence():
    nv, c = collector([FakeGpu(0)], slow_s=15)
    for _ in range(10):  # fake clock advances 1 s per step
        c.step()
    assert nv.calls["nvmlDeviceGetUtilizationRates"] == 10
    assert nv.calls["nvmlDeviceGetTotalEnergyConsumption"] == 1
    assert nv.calls["nvmlGpmSampleGet"] == 2


def test_lost_gpu_becomes_event_and_others_keep_sampling():
    gpus = [FakeGpu(0), FakeGpu(1)]
    _, c = collector(gpus)
    c.step()
    gpus[1].lost = True
    snap, events = split(c.step())
    assert [e.kind for e in events] == [EventKind.GPU_LOST] and events[0].gpu_index == 1
    assert snap.gpus.rows()[1].util_gpu is None and snap.gpus.rows()[1].uuid == gpus[1].uuid
    assert snap.gpus.rows()[0].util_gpu == 37
    snap2, events2 = split(c.step())
    assert events2 == [] and snap2.gpus.rows()[0].util_gpu == 37  # reported once, sampling goes on


def test_gpu_whose_calls_all_start_failing_counts_as_lost():
    gpu = FakeGpu(0)
    _, c = collector([gpu, FakeGpu(1)])
    c.step()
    gpu.unsupported = {n for n in dir(FakeNvml) if n.startswith("_nvmlDevice")} | {
        n[1:] for n in dir(FakeNvml) if n.startswith("_nvmlDevice")}
    snap, events = split(c.step())
    assert [e.kind for e in events] == [EventKind.GPU_LOST]


def test_mig_on_is_reported_and_gpm_skipped():
    nv, c = collector([FakeGpu(0, mig=(1, 1))])
    g = split(c.step())[0].gpus.rows()[0]
    assert g.mig_mode is True and g.sm_active is None
    assert "nvmlGpmSampleGet" not in nv.calls


def test_counter_rises_become_events():
    gpu = FakeGpu(0)
    _, c = collector([gpu])
    c.step()
    gpu.ecc[(1, 0)] = 1
    gpu.remap = (0, 1, 1, 0)
    _, events = split(c.step())
    assert {e.kind for e in events} == {EventKind.ECC_DBE, EventKind.ROW_REMAP}
    assert all(e.source == "counter" and e.node == "n1" for e in events)


def test_a_lowered_power_limit_is_told_from_the_default_which_is_read_once():
    nv, c = collector([FakeGpu(0, limit_mw=450000)])
    g = split(c.step())[0].gpus.rows()[0]
    assert (g.power_limit_w, g.power_default_limit_w) == (450, 700)
    split(c.step())
    assert nv.calls["nvmlDeviceGetPowerManagementDefaultLimit"] == 1  # static: not on the tick path


def test_dcgm_exporter_s_fields_outside_the_contract_are_read_for_metrics():
    """#32, point 4: the graphics engine's activity and PCIe bytes/s from the GPM sample already
    taken (DCGM's own source on GPM GPUs), encoder and decoder utilisation from NVML; without GPM,
    PCIe from nvmlDeviceGetPcieThroughput (KB/s) and no graphics-engine ratio. The snapshot (the
    contract) is unchanged: these serve /metrics alone."""
    nv, c = collector([FakeGpu(0), FakeGpu(1, gpm=False)])
    snap, _ = split(c.step())
    gpm, plain = (c.dcgm_fields("n1", g) for g in snap.gpus.rows())
    idle = {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0.0, "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0}
    assert gpm == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.9, "DCGM_FI_PROF_PCIE_TX_BYTES": 12.5 * 2**20,
                   "DCGM_FI_PROF_PCIE_RX_BYTES": 3000.0 * 2**20, "DCGM_FI_DEV_ENC_UTIL": 3.0,
                   "DCGM_FI_DEV_DEC_UTIL": 7.0, **idle}
    assert plain == {"DCGM_FI_PROF_PCIE_TX_BYTES": 2048 * 1024.0, "DCGM_FI_PROF_PCIE_RX_BYTES": 8192 * 1024.0,
                     "DCGM_FI_DEV_ENC_UTIL": 3.0, "DCGM_FI_DEV_DEC_UTIL": 7.0, **idle}
    assert nv.calls["nvmlDeviceGetPcieThroughput"] == 2  # the GPM GPU needs none (20 ms a call on an H200)
    assert "DCGM_FI_DEV_ENC_UTIL" not in encode(snap).decode()


def test_nvlink_bandwidth_is_dcgm_s_throughput_over_every_link():
    """#32, point 6: DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL as DCGM computes field 449: NVML's data
    counters RX + TX (KiB) over every link (scopeId UINT_MAX), their rise over the time between
    NVML's timestamps, / 1000; 0 on the first read; absent without NVLink. RX crosses 2**32 KiB
    between two reads, so a read of the union's 32-bit member would see it go back."""
    links = [(0, 0)] * 18
    nv, c = collector([FakeGpu(0, nvlink_kib=links), FakeGpu(1, nvlink_kib=None, gpm=False)])

    def bandwidth():
        c.collect_slow()
        return [g.dcgm.get("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL") for g in c.gpus]

    base = 2**32 - 1_000_000
    nv.gpus[0].nvlink_kib = [(base, base)] + links[1:]
    assert bandwidth() == [0.0, None]  # the first read: no rate yet, and no NVLink on GPU 1
    nv.now_us += 10_000_000
    nv.gpus[0].nvlink_kib = [(base + 6_000_000, base)] + links[1:3] + [(0, 4_000_000)] + links[4:]
    assert bandwidth() == [1000.0, None]  # 10,000,000 KiB in 10 s / 1000; link 3 counted too
    nv.now_us += 10_000_000
    nv.gpus[0].nvlink_kib = [(2048, 0)] + links[1:]  # the driver reloaded: counters back near 0
    assert bandwidth() == [0.0, None]
    nv.now_us += 4_000_000
    nv.gpus[0].nvlink_kib = [(2048 + 2_000_000, 0)] + links[1:]
    assert bandwidth() == [500.0, None]


def test_vgpu_license_status_as_dcgm_reads_it():
    """#32, point 6: DCGM_FI_DEV_VGPU_LICENSE_STATUS from nvmlDeviceGetGridLicensableFeatures,
    mapped as DCGM maps it: 0 where vGPU licensing is not supported (a bare-metal GPU: dcgm-exporter
    serves 0 there), the vGPU feature's state as 1/0 where it is, absent where NVML fails or lists
    no vGPU feature."""
    gpus = [FakeGpu(0), FakeGpu(1, grid_supported=True, grid_features={1: 1}),
            FakeGpu(2, grid_supported=True, grid_features={2: 1, 1: 0}),
            FakeGpu(3, grid_supported=True, grid_features={2: 1}),
            FakeGpu(4, unsupported={"nvmlDeviceGetGridLicensableFeatures"})]
    _, c = collector(gpus)
    snap, _ = split(c.step())
    status = [c.dcgm_fields("n1", g).get("DCGM_FI_DEV_VGPU_LICENSE_STATUS") for g in snap.gpus.rows()]
    assert status == [0.0, 1.0, 0.0, None, None]
