"""NVML collector: NodeSnapshot records from the real GPUs, on two cadences.

Fast set (every tick, ~50 µs per GPU on an H200): utilization, memory,
temperature, power, clocks and reasons, pstate, ECC totals, remapped rows, PCIe
generation, processes. Slow set (``slow_s``, in its own thread so it never
delays a tick): energy (~3 ms), PCIe width and replays, HBM temperature (field
values), NVLink, fan, the enforced power limit, MIG mode and GPM (two samples
≥100 ms apart). Static facts are read once: the maximum SM clock (~1.5 ms) and
the default power limit (with which a rule tells a lowered limit from the
board's own), the widest PCIe link the GPU and its slot allow (with which the
engine tells a link that trained down), serial, VBIOS. ``NotSupported`` (or any per-call error)
gives ``None``; ``GPU_IS_LOST`` — or every fast call failing — marks the GPU
lost, emits a ``gpu_lost`` event and sampling continues for the other GPUs.
MIG: the mode is reported; per-instance metrics are not collected yet.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any, NamedTuple

from gpuwarden import clocks
from gpuwarden.contract import EventKind, GpuProcess, GpuSample, NodeSnapshot
from gpuwarden.producers.attrib import Attributor
from gpuwarden.producers.events import EventLog, HwEvent, counter_events, normalize_bus_id, recovery_action_name

log = logging.getLogger(__name__)
AGENT_VERSION = "gpuwarden-agent/0.1"
_GPM_METRICS = ("NVML_GPM_METRIC_SM_UTIL", "NVML_GPM_METRIC_SM_OCCUPANCY",
                "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "NVML_GPM_METRIC_DRAM_BW_UTIL")
_GPM_FIELDS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")
#: GPM metrics for dcgm-exporter's series only (/metrics, not the contract): DCGM reads these on
#: GPM GPUs (DCGM's DcgmFieldIdToNvmlGpmMetricId): metric → (DCGM name, scale to DCGM's unit).
_GPM_DCGM = {"NVML_GPM_METRIC_GRAPHICS_UTIL": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01),  # % → ratio
             "NVML_GPM_METRIC_PCIE_TX_PER_SEC": ("DCGM_FI_PROF_PCIE_TX_BYTES", 1 << 20),  # MiB/s → B/s
             "NVML_GPM_METRIC_PCIE_RX_PER_SEC": ("DCGM_FI_PROF_PCIE_RX_BYTES", 1 << 20)}
#: ``scopeId`` asking NVML for a throughput counter summed over every link (nvml.h: "A scopeId of
#: UINT_MAX returns aggregate value summed up across all links"), as DCGM passes for field 449.
_ALL_LINKS = 0xFFFFFFFF
#: nvmlValue_t's member for each ``valueType`` (nvml.h's nvmlValueType_t: 0 double, 1 unsigned int,
#: 2 unsigned long, 3 unsigned long long, 4 signed long long, 5 signed int, 6 unsigned short).
_VALUE_MEMBER = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


class NvlinkReading(NamedTuple):
    """NVML's NVLink data counters of one GPU at one read: RX plus TX over every link."""

    kib: int  # KiB since the driver loaded
    at_us: int  # NVML's timestamp of the read, µs since 1970


class GpuLost(Exception):
    """NVML said GPU_IS_LOST for this device."""


def load_nvml() -> Any:
    """The pynvml module, initialised; raises ImportError or pynvml.NVMLError with the reason."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


class _Gpu:
    def __init__(self, index: int, handle: Any) -> None:
        self.index, self.handle = index, handle
        self.uuid, self.name, self.bus_id = f"unknown-{index}", None, None
        self.static: dict[str, Any] = {}
        self.slow: dict[str, Any] = {}
        self.prev: GpuSample | None = None
        self.lost = False
        self.gpm_supported = False
        self.dcgm: dict[str, float] = {}  # dcgm-exporter fields the contract has no column for (slow set)
        self.gpm_dcgm: dict[str, float] = {}  # those of them the last GPM sample gave
        self.nvlink: NvlinkReading | None = None  # the last NVLink data counters, for DCGM's bandwidth


class NvmlCollector:
    """A :class:`gpuwarden.producers.source.Source` over the local GPUs."""

    def __init__(self, nvml: Any, *, node: str | None = None, tick_s: float = 1.0, slow_s: float = 15.0,
                 attributor: Callable[[int], Any] | None = None, events: EventLog | None = None,
                 clock: Callable[[], float] = time.time, gpm_interval_s: float = 0.1,
                 slow_in_thread: bool = True) -> None:
        self.nv, self.tick_s, self.slow_s, self.clock = nvml, tick_s, slow_s, clock
        self.node = node or socket.gethostname()
        self.boot_id = str(uuidlib.uuid4())
        self.attribute = attributor or Attributor()
        self.gpm_interval_s = gpm_interval_s
        self.seq = 0
        self.processes: list[GpuProcess] = []
        nv = nvml
        self.driver = self._safe(nv.nvmlSystemGetDriverVersion)
        cuda = self._safe(nv.nvmlSystemGetCudaDriverVersion)
        self.cuda = f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None
        self.gpus = [_Gpu(i, nv.nvmlDeviceGetHandleByIndex(i)) for i in range(nv.nvmlDeviceGetCount())]
        for g in self.gpus:
            self._read_static(g)
        self.events = events or EventLog(self.node, self.boot_id,
                                         {g.bus_id: g.index for g in self.gpus if g.bus_id})
        if self.events.recovery_reader is None:
            self.events.recovery_reader = self.recovery_action
        self._slow_lock = threading.Lock()
        self._stop = threading.Event()
        self._slow_thread: threading.Thread | None = None
        self._slow_due = 0.0
        self._slow_in_thread = slow_in_thread
        if slow_in_thread:
            self._slow_thread = threading.Thread(target=self._slow_loop, name="nvml-slow", daemon=True)
            self._slow_thread.start()

    # ------------------------------------------------------------------ calls

    def _safe(self, fn: Callable, *args: Any, **kw: Any) -> Any:
        """The call's value, or None when unsupported or failing; GpuLost when the GPU is gone."""
        try:
            return fn(*args, **kw)
        except self.nv.NVMLError as e:
            if getattr(e, "value", None) == self.nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost() from None
            return None

    def _read_static(self, g: _Gpu) -> None:
        nv, h = self.nv, g.handle
        try:
            g.uuid = _text(self._safe(nv.nvmlDeviceGetUUID, h)) or g.uuid
            g.name = _text(self._safe(nv.nvmlDeviceGetName, h))
            pci = self._safe(nv.nvmlDeviceGetPciInfo, h)
            g.bus_id = normalize_bus_id(_text(pci.busId)[-12:]) if pci is not None else None
            g.static = {
                "clock_sm_max_mhz": self._safe(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
                "power_default_limit_w": _watts(self._safe(nv.nvmlDeviceGetPowerManagementDefaultLimit, h)),
                "pcie_gen_max": self._safe(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_width_max": self._safe(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
                "serial": _text(self._safe(nv.nvmlDeviceGetSerial, h)),
                "vbios": _text(self._safe(nv.nvmlDeviceGetVbiosVersion, h)),
            }
            support = self._safe(nv.nvmlGpmQueryDeviceSupport, h)
            g.gpm_supported = bool(getattr(support, "isSupportedDevice", 0))
        except GpuLost:
            self._mark_lost(g, self.clock())

    def recovery_action(self, index: int) -> str | None:
        """What the driver asks for on GPU ``index`` now (``GPU_RESET``, ``NODE_REBOOT``, ...; XID
        154), read as field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`` where the binding offers it
        (the installed nvidia-ml-py 13.615 does); None where it does not, where an older driver
        answers NotSupported, or where the GPU is gone. Called from the event threads, on XID 154 only."""
        nv = self.nv
        field_id = getattr(nv, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", None)
        if field_id is None or not 0 <= index < len(self.gpus):
            return None
        try:
            fields = self._safe(nv.nvmlDeviceGetFieldValues, self.gpus[index].handle, [field_id])
        except GpuLost:
            return None
        if not fields or getattr(fields[0], "nvmlReturn", 1) != 0:
            return None
        value = _field_value(fields[0])
        return None if value is None else recovery_action_name(int(value), nv)

    # ------------------------------------------------------------------ slow set

    def _slow_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.collect_slow()
            self._stop.wait(max(0.0, self.slow_s - (time.monotonic() - started)))

    def collect_slow(self) -> None:
        """Read the expensive fields of every GPU (run off the tick path)."""
        for g in self.gpus:
            if g.lost:
                continue
            try:
                values = self._slow_values(g)
                dcgm = self._dcgm_values(g, values)
            except GpuLost:
                self._mark_lost(g, self.clock())
                continue
            with self._slow_lock:
                g.slow, g.dcgm = values, dcgm

    def _slow_values(self, g: _Gpu) -> dict[str, Any]:
        nv, h, s = self.nv, g.handle, self._safe
        out: dict[str, Any] = {}
        out["energy_mj"] = s(nv.nvmlDeviceGetTotalEnergyConsumption, h)
        out["pcie_width"] = s(nv.nvmlDeviceGetCurrPcieLinkWidth, h)
        out["pcie_replay_counter"] = s(nv.nvmlDeviceGetPcieReplayCounter, h)
        out["power_limit_w"] = _watts(s(nv.nvmlDeviceGetEnforcedPowerLimit, h))
        fan = s(nv.nvmlDeviceGetFanSpeed, h)
        out["fan_pct"] = min(100, fan) if fan is not None else None
        mig = s(nv.nvmlDeviceGetMigMode, h)
        out["mig_mode"] = bool(mig[0]) if mig else None
        fields = s(nv.nvmlDeviceGetFieldValues, h, [nv.NVML_FI_DEV_MEMORY_TEMP])
        if fields and getattr(fields[0], "nvmlReturn", 1) == 0:
            out["temp_memory_c"] = _field_value(fields[0]) or None
        up = down = 0
        for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
            state = s(nv.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                break
            up, down = up + (state == 1), down + (state != 1)
        out["nvlink_up"], out["nvlink_down"] = (up, down) if up or down else (None, None)
        if g.gpm_supported and not out["mig_mode"]:
            out.update(self._gpm(g))
        return out

    def _dcgm_values(self, g: _Gpu, slow: dict[str, Any]) -> dict[str, float]:
        """dcgm-exporter's default fields that only /metrics serves: encoder and decoder
        utilisation (NVML), NVLink bandwidth and the vGPU licence as DCGM reads them, and from the
        GPM sample (:meth:`_gpm`) the graphics engine's activity and PCIe bytes/s, else PCIe from
        ``nvmlDeviceGetPcieThroughput`` (KB/s over 20 ms)."""
        nv, h, s = self.nv, g.handle, self._safe
        out: dict[str, float] = dict(g.gpm_dcgm) if g.gpm_supported and not slow.get("mig_mode") else {}
        for name, fn in (("DCGM_FI_DEV_ENC_UTIL", "nvmlDeviceGetEncoderUtilization"),
                         ("DCGM_FI_DEV_DEC_UTIL", "nvmlDeviceGetDecoderUtilization")):
            got = s(getattr(nv, fn), h) if hasattr(nv, fn) else None
            if got is not None:
                out[name] = float(got[0])
        bandwidth = self._nvlink_bandwidth(g)
        if bandwidth is not None:
            out["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] = bandwidth
        licensed = self._vgpu_license(g)
        if licensed is not None:
            out["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] = licensed
        if "DCGM_FI_PROF_PCIE_TX_BYTES" not in out and hasattr(nv, "nvmlDeviceGetPcieThroughput"):
            for name, counter in (("DCGM_FI_PROF_PCIE_TX_BYTES", "NVML_PCIE_UTIL_TX_BYTES"),
                                  ("DCGM_FI_PROF_PCIE_RX_BYTES", "NVML_PCIE_UTIL_RX_BYTES")):
                kb = s(nv.nvmlDeviceGetPcieThroughput, h, getattr(nv, counter, 0 if "TX" in counter else 1))
                if kb is not None:
                    out[name] = float(kb) * 1024
        return out

    def _nvlink_bandwidth(self, g: _Gpu) -> float | None:
        """DCGM's field 449 (``DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL``) as DCGM computes it
        (DcgmCacheManager::ReadAndCacheNvLinkBandwidth): NVML's data counters RX + TX summed over
        every link (KiB), their rise since the last read over the time between NVML's two
        timestamps, divided by 1000: a throughput DCGM calls MiB/s, in whole units; 0 on the first
        read and while the counters read 0. None (the series absent, as dcgm-exporter leaves a
        field DCGM could not read) where NVML answers either field with an error (its own
        ``nvmlReturn``). One departure: counters that went back (a driver reload) start again at 0 where
        DCGM would publish a negative rate."""
        nv = self.nv
        ids = [getattr(nv, f"NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{d}", None) for d in ("RX", "TX")]
        if None in ids:
            return None
        fields = self._safe(nv.nvmlDeviceGetFieldValues, g.handle, [(i, _ALL_LINKS) for i in ids])
        if not fields or any(getattr(f, "nvmlReturn", 1) != 0 for f in fields):
            return None
        values = [_field_value(f) for f in fields]
        if None in values:
            return None
        at_us = max(int(getattr(f, "timestamp", 0) or 0) for f in fields) or int(self.clock() * 1e6)
        now, last = NvlinkReading(int(sum(values)), at_us), g.nvlink
        g.nvlink = now
        if now.kib == 0 or last is None or now.at_us <= last.at_us or now.kib < last.kib:
            return 0.0
        return float(int((now.kib - last.kib) / ((now.at_us - last.at_us) / 1e6) / 1000))

    def _vgpu_license(self, g: _Gpu) -> float | None:
        """``DCGM_FI_DEV_VGPU_LICENSE_STATUS`` as DCGM reads it per GPU (DcgmCacheManager's case
        for the field): ``nvmlDeviceGetGridLicensableFeatures``; 0 where the system does not
        support vGPU software licensing (``isGridLicenseSupported`` 0: a bare-metal GPU, where
        dcgm-exporter serves 0 too), else 1 or 0 from the vGPU feature's ``featureState``; None
        (absent) where NVML fails or lists no vGPU feature, where DCGM stores no number."""
        nv = self.nv
        if not hasattr(nv, "nvmlDeviceGetGridLicensableFeatures"):
            return None
        got = self._safe(nv.nvmlDeviceGetGridLicensableFeatures, g.handle)
        if got is None:
            return None
        if not got.isGridLicenseSupported:
            return 0.0
        vgpu = getattr(nv, "NVML_GRID_LICENSE_FEATURE_CODE_VGPU", 1)
        features = list(got.gridLicensableFeatures)[:got.licensableFeaturesCount]
        return next((1.0 if f.featureState > 0 else 0.0 for f in features if f.featureCode == vgpu), None)

    def dcgm_fields(self, node: str, sample: GpuSample) -> dict[str, float]:
        """The dcgm-exporter fields of GPU ``sample.index`` read on the slow cadence (for /metrics)."""
        for g in self.gpus:
            if g.index == sample.index and not g.lost:
                with self._slow_lock:
                    return dict(g.dcgm)
        return {}

    def _gpm(self, g: _Gpu) -> dict[str, float]:
        """The contract's GPM fields; the dcgm-only ones go to ``g.gpm_dcgm``."""
        nv = self.nv
        try:
            s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
            try:
                nv.nvmlGpmSampleGet(g.handle, s1)
                time.sleep(self.gpm_interval_s)
                nv.nvmlGpmSampleGet(g.handle, s2)
                mg = nv.c_nvmlGpmMetricsGet_t()
                extra = [m for m in _GPM_DCGM if hasattr(nv, m)]
                metrics = (*_GPM_METRICS, *extra)
                mg.version, mg.numMetrics, mg.sample1, mg.sample2 = nv.NVML_GPM_METRICS_GET_VERSION, len(metrics), s1, s2
                for i, name in enumerate(metrics):
                    mg.metrics[i].metricId = getattr(nv, name)
                nv.nvmlGpmMetricsGet(mg)
                n = len(_GPM_METRICS)
                g.gpm_dcgm = {_GPM_DCGM[m][0]: max(0.0, float(mg.metrics[n + i].value)) * _GPM_DCGM[m][1]
                              for i, m in enumerate(extra) if mg.metrics[n + i].nvmlReturn == 0}
                return {f: round(min(100.0, max(0.0, float(mg.metrics[i].value))), 2)
                        for i, f in enumerate(_GPM_FIELDS) if mg.metrics[i].nvmlReturn == 0}
            finally:
                nv.nvmlGpmSampleFree(s1)
                nv.nvmlGpmSampleFree(s2)
        except nv.NVMLError as e:
            if getattr(e, "value", None) == nv.NVML_ERROR_GPU_IS_LOST:
                raise GpuLost() from None
            return {}

    # ------------------------------------------------------------------ fast set

    def _mark_lost(self, g: _Gpu, ts: float) -> None:
        if not g.lost:
            g.lost = True
            log.error("GPU %d (%s) is lost; sampling the other GPUs", g.index, g.uuid)
            self.events.add(HwEvent(EventKind.GPU_LOST, "nvml", ts, gpu_index=g.index, gpu_uuid=g.uuid,
                                    pci_bus_id=g.bus_id, message="GPU is lost (NVML)"))

    def _fast(self, g: _Gpu) -> tuple[GpuSample, list[tuple[int, int | None]]]:
        nv, h, s = self.nv, g.handle, self._safe
        util = s(nv.nvmlDeviceGetUtilizationRates, h)
        mem = s(nv.nvmlDeviceGetMemoryInfo, h, version=nv.nvmlMemory_v2) or s(nv.nvmlDeviceGetMemoryInfo, h)
        power = s(nv.nvmlDeviceGetPowerUsage, h)
        reasons = s(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
        remap = s(nv.nvmlDeviceGetRemappedRows, h)
        fast = {
            "util_gpu": getattr(util, "gpu", None), "util_memory": getattr(util, "memory", None),
            "mem_used_bytes": getattr(mem, "used", None), "mem_total_bytes": getattr(mem, "total", None),
            "mem_reserved_bytes": getattr(mem, "reserved", None),
            "temp_gpu_c": s(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
            "power_w": power / 1000 if power is not None else None,
            "clock_sm_mhz": s(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
            "clock_mem_mhz": s(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
            "clock_event_reasons": reasons,
            "clock_event_names": clocks.reason_names(reasons) if reasons is not None else [],
            "pstate": s(nv.nvmlDeviceGetPerformanceState, h),
            "pcie_gen": s(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        }
        for field, etype, counter in (
            ("ecc_volatile_corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC),
            ("ecc_volatile_uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC),
            ("ecc_aggregate_corrected", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC),
            ("ecc_aggregate_uncorrected", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC),
        ):
            fast[field] = s(nv.nvmlDeviceGetTotalEccErrors, h, etype, counter)
        if remap is not None:
            fast.update(remapped_rows_corrected=remap[0], remapped_rows_uncorrected=remap[1],
                        remap_pending=bool(remap[2]), remap_failure=bool(remap[3]))
        if all(v is None for k, v in fast.items() if k != "clock_event_names"):
            raise GpuLost()  # every call failing: treat as lost, as NVML would after a reset
        procs: list[tuple[int, int | None]] = []
        for fn in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
            for p in s(fn, h) or []:
                used = getattr(p, "usedGpuMemory", None)
                procs.append((int(p.pid), used if isinstance(used, int) and used < 1 << 60 else None))
        with self._slow_lock:
            slow = dict(g.slow)
        sample = GpuSample(index=g.index, uuid=g.uuid, name=g.name,
                           clock_sm_max_mhz=g.static.get("clock_sm_max_mhz"),
                           power_default_limit_w=g.static.get("power_default_limit_w"),
                           pcie_gen_max=g.static.get("pcie_gen_max"), pcie_width_max=g.static.get("pcie_width_max"),
                           **slow, **fast)
        return sample, procs

    def bus_ids(self) -> dict[int, str]:
        """GPU index → PCI bus id (read once at start), for the agent's ``pci_bus_id`` label."""
        return {g.index: g.bus_id for g in self.gpus if g.bus_id}

    def step(self) -> list:
        """One tick: the node's snapshot, then any events (sorted by ts)."""
        ts = self.clock()
        if not self._slow_in_thread and ts >= self._slow_due:
            self._slow_due = ts + self.slow_s
            self.collect_slow()
        samples: list[GpuSample] = []
        processes: list[GpuProcess] = []
        for g in self.gpus:
            if g.lost:
                samples.append(GpuSample(index=g.index, uuid=g.uuid, name=g.name))
                continue
            try:
                sample, procs = self._fast(g)
            except GpuLost:
                self._mark_lost(g, ts)
                samples.append(GpuSample(index=g.index, uuid=g.uuid, name=g.name))
                continue
            if g.prev is not None:
                for ev in counter_events(g.prev, sample, ts):
                    self.events.add(ev)
            g.prev = sample
            samples.append(sample)
            for pid, used in procs:
                a = self.attribute(pid)
                processes.append(GpuProcess(
                    pid=pid, gpu_index=g.index, gpu_uuid=g.uuid, used_memory_bytes=used,
                    uid=a.uid, user=a.user, container_id=a.container_id, pod_uid=a.pod_uid,
                    pod_name=a.pod_name, pod_namespace=a.pod_namespace, slurm_job_id=a.slurm_job_id,
                    task=a.task, task_id=a.task_id, project=a.project, command=a.command))
        self.processes = processes  # the latest GPU processes (the inference scraper's attribution)
        forget = getattr(self.attribute, "forget_except", None)
        if forget is not None:
            forget({p.pid for p in processes})
        snap = NodeSnapshot.of(ts=ts, node=self.node, seq=self.seq, boot_id=self.boot_id,
                            agent_version=AGENT_VERSION, driver_version=self.driver,
                            cuda_version=self.cuda, interval_s=self.tick_s, gpus=samples,
                            processes=processes)
        self.seq += 1
        return sorted([snap, *self.events.drain()], key=lambda r: r.ts)

    def close(self) -> None:
        self._stop.set()
        if self._slow_thread is not None:
            self._slow_thread.join(timeout=5)


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode() if isinstance(v, bytes) else str(v)


def _watts(milliwatts: int | None) -> float | None:
    return milliwatts / 1000 if milliwatts is not None else None


def _field_value(fv: Any) -> float | None:
    """A field value's number, read from the union member its ``valueType`` names (every member
    of pynvml's ctypes union exists: the first one found would read 64-bit counters as 32)."""
    member = _VALUE_MEMBER.get(getattr(fv, "valueType", None))
    got = getattr(getattr(fv, "value", None), member, None) if member else None
    return None if got is None else float(got)
