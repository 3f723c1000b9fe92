"""A stand-in for the ``pynvml`` module: same function names, errors and constants.

Used by the unit tests (NotSupported, GPU lost, MIG on) and by the overhead
benchmark, which gives each call the latency measured on a real H200
(``LATENCY_US_H200``): calls under 1 ms spin (NVML's cost is CPU in the
ioctl path), longer ones sleep (PCIe throughput waits a 20 ms window).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230  # nvml.h: a nvmlDeviceGpuRecoveryAction_t, unsigned int
NVML_VALUE_TYPE_UNSIGNED_INT = 1
# nvml.h (NVIDIA/DCGM@72fa3fe, sdk/nvidia/nvml/dcgm_nvml.h) l.532-538: nvmlValueType_t; l.2136-2144:
# "NVLink throughput counters field values ... A scopeId of UINT_MAX returns aggregate value summed up
# across all links", 138 "NVLink TX Data throughput in KiB", 139 "NVLink RX Data throughput in KiB";
# l.2385: a field value's timestamp, "CPU Timestamp of this value in microseconds since 1970".
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 138, 139
UINT_MAX = 0xFFFFFFFF
# nvml.h l.1461-1466 nvmlGridLicenseFeatureCode_t (1 "Virtual GPU", 2 "Nvidia RTX", 4 "Compute"); l.1538.
NVML_GRID_LICENSE_FEATURE_CODE_VGPU, NVML_GRID_LICENSE_FEATURE_CODE_NVIDIA_RTX = 1, 2
NVML_GRID_LICENSE_FEATURE_MAX_COUNT = 3
NVML_GPU_RECOVERY_ACTION_NONE, NVML_GPU_RECOVERY_ACTION_GPU_RESET = 0, 1
NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, NVML_GPU_RECOVERY_ACTION_DRAIN_P2P = 2, 3
NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET = 4
NVML_GPM_METRIC_SM_UTIL, NVML_GPM_METRIC_SM_OCCUPANCY = 2, 3
NVML_GPM_METRIC_ANY_TENSOR_UTIL, NVML_GPM_METRIC_DRAM_BW_UTIL = 5, 10
NVML_GPM_METRIC_GRAPHICS_UTIL, NVML_GPM_METRIC_PCIE_TX_PER_SEC, NVML_GPM_METRIC_PCIE_RX_PER_SEC = 1, 20, 21
NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
NVML_GPM_METRICS_GET_VERSION = 1
NVML_NVLINK_MAX_LINKS = 18
nvmlMemory_v2 = 0x02000028

#: Median µs per call on an H200 (shared reference nvml-costs-h200.md).
LATENCY_US_H200 = {
    "nvmlDeviceGetUtilizationRates": 1.63, "nvmlDeviceGetMemoryInfo": 8.1,
    "nvmlDeviceGetTemperature": 1.88, "nvmlDeviceGetPowerUsage": 1.7,
    "nvmlDeviceGetEnforcedPowerLimit": 1.72, "nvmlDeviceGetTotalEnergyConsumption": 3145.82,
    "nvmlDeviceGetClockInfo": 2.3, "nvmlDeviceGetMaxClockInfo": 1453.2,
    "nvmlDeviceGetCurrentClocksEventReasons": 1.89, "nvmlDeviceGetPerformanceState": 1.59,
    "nvmlDeviceGetTotalEccErrors": 2.85, "nvmlDeviceGetRemappedRows": 2.69,
    "nvmlDeviceGetCurrPcieLinkGeneration": 1.48, "nvmlDeviceGetCurrPcieLinkWidth": 30.94,
    "nvmlDeviceGetPcieReplayCounter": 146.72, "nvmlDeviceGetPcieThroughput": 20955.99,
    "nvmlDeviceGetFanSpeed": 2.0, "nvmlDeviceGetNvLinkState": 2.0,
    "nvmlDeviceGetComputeRunningProcesses": 9.65, "nvmlDeviceGetGraphicsRunningProcesses": 9.65,
    "nvmlDeviceGetMigMode": 161.85, "nvmlDeviceGetPersistenceMode": 5.74,
    "nvmlDeviceGetFieldValues": 40.0, "nvmlGpmSampleGet": 335.58, "nvmlGpmMetricsGet": 20.0,
}


class NvmlValue(ctypes.Union):
    """nvml.h l.547-556 ``nvmlValue_t``: every member reads the same bytes, as pynvml's union does."""

    _fields_ = [("dVal", ctypes.c_double), ("siVal", ctypes.c_int), ("uiVal", ctypes.c_uint),
                ("ulVal", ctypes.c_ulong), ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong),
                ("usVal", ctypes.c_ushort)]


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's names
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_NOT_SUPPORTED)


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_GPU_IS_LOST)


class NVMLError_Timeout(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(NVML_ERROR_TIMEOUT)


@dataclass
class FakeGpu:
    """One fake device; ``unsupported`` names calls that raise NotSupported."""

    index: int
    name: str = "NVIDIA H200"
    uuid: str = ""
    bus_id: str = ""
    mem_total: int = 143771 << 20
    mem_used: int = 615 << 20
    util: int = 37
    temp: int = 41
    power_mw: int = 120910
    limit_mw: int = 700000
    default_limit_mw: int = 700000
    energy_mj: int = 2414713
    sm_mhz: int = 1980
    mem_mhz: int = 3201
    sm_max: int = 1980
    reasons: int = 0x4
    ecc: dict = field(default_factory=lambda: {(0, 0): 0, (1, 0): 0, (0, 1): 2, (1, 1): 0})
    remap: tuple = (0, 0, 0, 0)
    replay: int = 0
    pcie: tuple = (5, 16)
    """(generation, width) of the link now (``nvmlDeviceGetCurrPcieLinkGeneration``/``Width``)."""
    pcie_max: tuple = (5, 16)
    """(generation, width) "possible with this device and system" (``nvmlDeviceGetMaxPcieLinkGeneration``/
    ``Width``, NVML's reference: a Gen2 device on a Gen1 bus reports Gen1, an x16 device on an x8 bus x8):
    the lower of the GPU's and its slot's; a link that trained down runs below it."""
    mig: tuple = (0, 0)
    processes: list = field(default_factory=list)
    unsupported: set = field(default_factory=lambda: {"nvmlDeviceGetFanSpeed", "nvmlDeviceGetNvLinkState"})
    lost: bool = False
    gpm: bool = True
    recovery_action: int | None = None
    """Field 230's value; None: the driver predates it (the field answers NOT_SUPPORTED)."""
    nvlink_kib: list = field(default_factory=lambda: [(0, 0)] * 18)
    """(RX, TX) data KiB per NVLink link (fields 139, 138); None: no NVLink (NOT_SUPPORTED)."""
    grid_supported: bool = False
    """``isGridLicenseSupported``: non-zero "if vGPU Software Licensing is supported on the system"
    (nvml.h l.1911): false on a bare-metal GPU."""
    grid_features: dict = field(default_factory=dict)
    """featureCode → featureState ("Non-zero if feature is currently licensed", nvml.h l.1899)."""

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08x}-0000-0000-0000-000000000000"
        self.bus_id = self.bus_id or f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


class FakeNvml:
    """Module-like object: ``collector(nvml=FakeNvml([...]))``."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_Timeout = NVMLError_Timeout

    def __init__(self, gpus: list[FakeGpu], *, latency_us: dict[str, float] | None = None,
                 driver: str = "580.159.04", cuda: int = 13000) -> None:
        self.gpus, self.latency_us = gpus, latency_us or {}
        self.driver, self.cuda = driver, cuda
        self.now_us = 1_700_000_000_000_000  # the field values' timestamp (tests move it)
        self.calls: dict[str, int] = {}
        for k, v in globals().items():
            if k.startswith("NVML_") or k == "nvmlMemory_v2":
                setattr(self, k, v)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvmlDevice") or name.startswith("nvmlGpm"):
            impl = getattr(type(self), "_" + name)
            return lambda *a, **kw: self._call(name, impl, *a, **kw)
        raise AttributeError(name)

    def _call(self, name: str, impl, *args, **kw):
        self.calls[name] = self.calls.get(name, 0) + 1
        us = self.latency_us.get(name, 0.0)
        if us >= 1000:
            time.sleep(us / 1e6)
        elif us > 0:
            end = time.perf_counter() + us / 1e6
            while time.perf_counter() < end:
                pass
        gpu = args[0] if args and isinstance(args[0], FakeGpu) else None
        if gpu is not None:
            if gpu.lost:
                raise NVMLError_GpuIsLost()
            if name in gpu.unsupported:
                raise NVMLError_NotSupported()
        return impl(self, *args, **kw)

    # ----------------------------------------------------------------- system
    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def _nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    # ----------------------------------------------------------------- device
    def _nvmlDeviceGetName(self, g): return g.name
    def _nvmlDeviceGetUUID(self, g): return g.uuid
    def _nvmlDeviceGetSerial(self, g): return f"16525230{g.index:05d}"
    def _nvmlDeviceGetVbiosVersion(self, g): return "96.00.A5.00.1A"
    def _nvmlDeviceGetPciInfo(self, g): return SimpleNamespace(busId=g.bus_id)
    def _nvmlDeviceGetUtilizationRates(self, g): return SimpleNamespace(gpu=g.util, memory=g.util // 4)
    def _nvmlDeviceGetMemoryInfo(self, g, version=None):
        return SimpleNamespace(total=g.mem_total, used=g.mem_used, free=g.mem_total - g.mem_used,
                               reserved=g.mem_total // 240)
    def _nvmlDeviceGetTemperature(self, g, sensor): return g.temp
    def _nvmlDeviceGetPowerUsage(self, g): return g.power_mw
    def _nvmlDeviceGetEnforcedPowerLimit(self, g): return g.limit_mw
    def _nvmlDeviceGetPowerManagementDefaultLimit(self, g): return g.default_limit_mw
    def _nvmlDeviceGetTotalEnergyConsumption(self, g): return g.energy_mj
    def _nvmlDeviceGetClockInfo(self, g, kind): return g.sm_mhz if kind == NVML_CLOCK_SM else g.mem_mhz
    def _nvmlDeviceGetMaxClockInfo(self, g, kind): return g.sm_max
    def _nvmlDeviceGetCurrentClocksEventReasons(self, g): return g.reasons
    def _nvmlDeviceGetPerformanceState(self, g): return 0
    def _nvmlDeviceGetTotalEccErrors(self, g, etype, counter): return g.ecc[(etype, counter)]
    def _nvmlDeviceGetRemappedRows(self, g): return g.remap
    def _nvmlDeviceGetCurrPcieLinkGeneration(self, g): return g.pcie[0]
    def _nvmlDeviceGetCurrPcieLinkWidth(self, g): return g.pcie[1]
    def _nvmlDeviceGetMaxPcieLinkGeneration(self, g): return g.pcie_max[0]
    def _nvmlDeviceGetMaxPcieLinkWidth(self, g): return g.pcie_max[1]
    def _nvmlDeviceGetPcieReplayCounter(self, g): return g.replay
    def _nvmlDeviceGetPcieThroughput(self, g, counter): return 2048 if counter == NVML_PCIE_UTIL_TX_BYTES else 8192
    def _nvmlDeviceGetEncoderUtilization(self, g): return [3, 167000]
    def _nvmlDeviceGetDecoderUtilization(self, g): return [7, 167000]
    def _nvmlDeviceGetFanSpeed(self, g): return 30
    def _nvmlDeviceGetNvLinkState(self, g, link): return 1
    def _nvmlDeviceGetMigMode(self, g): return list(g.mig)
    def _nvmlDeviceGetPersistenceMode(self, g): return 1
    def _nvmlDeviceGetComputeRunningProcesses(self, g):
        return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in g.processes]
    def _nvmlDeviceGetGraphicsRunningProcesses(self, g): return []
    def _nvmlDeviceGetFieldValues(self, g, ids):
        """nvmlFieldValue_t per id, an id alone or ``(fieldId, scopeId)`` as pynvml takes them; its
        ``value`` a union to read by ``valueType`` (uiVal for unsigned ints, ullVal for the NVLink
        counters; a read of another member gives other bits, as on the real union); an unknown
        field fails in its own ``nvmlReturn``, not the call (nvml.h)."""
        def nvlink(scope, side):
            if g.nvlink_kib is None:
                return None
            links = g.nvlink_kib if scope == UINT_MAX else g.nvlink_kib[scope:scope + 1]
            return sum(link[side] for link in links) if links else None

        def one(i):
            fid, scope = i if isinstance(i, tuple) else (i, 0)
            value, vtype = {NVML_FI_DEV_MEMORY_TEMP: (g.temp + 6, NVML_VALUE_TYPE_UNSIGNED_INT),
                            NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (g.recovery_action, NVML_VALUE_TYPE_UNSIGNED_INT),
                            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: (nvlink(scope, 0), NVML_VALUE_TYPE_UNSIGNED_LONG_LONG),
                            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: (nvlink(scope, 1), NVML_VALUE_TYPE_UNSIGNED_LONG_LONG),
                            }.get(fid, (None, 0))
            if value is None:
                return SimpleNamespace(fieldId=fid, scopeId=scope, nvmlReturn=NVML_ERROR_NOT_SUPPORTED, valueType=0,
                                       timestamp=0, value=None)
            member = "uiVal" if vtype == NVML_VALUE_TYPE_UNSIGNED_INT else "ullVal"
            return SimpleNamespace(fieldId=fid, scopeId=scope, nvmlReturn=NVML_SUCCESS, valueType=vtype,
                                   timestamp=self.now_us, value=NvmlValue(**{member: value}))
        return [one(i) for i in ids]

    def _nvmlDeviceGetGridLicensableFeatures(self, g):
        """nvmlGridLicensableFeatures_t (nvml.h l.1909-1914): NVML_SUCCESS on any GPU (the doc's
        returns, l.9490-9494, list no NOT_SUPPORTED), the features in a fixed array of
        NVML_GRID_LICENSE_FEATURE_MAX_COUNT with ``licensableFeaturesCount`` of them filled."""
        filled = [SimpleNamespace(featureCode=code, featureState=state) for code, state in g.grid_features.items()]
        blank = [SimpleNamespace(featureCode=0, featureState=0)] * (NVML_GRID_LICENSE_FEATURE_MAX_COUNT - len(filled))
        return SimpleNamespace(isGridLicenseSupported=int(g.grid_supported), licensableFeaturesCount=len(filled),
                               gridLicensableFeatures=filled + blank)

    # ----------------------------------------------------------------- GPM
    def _nvmlGpmQueryDeviceSupport(self, g):
        return SimpleNamespace(isSupportedDevice=int(g.gpm))
    def _nvmlGpmSampleAlloc(self): return SimpleNamespace()
    def _nvmlGpmSampleFree(self, s): return None
    def _nvmlGpmSampleGet(self, g, s): return s
    def _nvmlGpmMetricsGet(self, mg):
        values = {NVML_GPM_METRIC_SM_UTIL: 81.5, NVML_GPM_METRIC_SM_OCCUPANCY: 40.25,
                  NVML_GPM_METRIC_ANY_TENSOR_UTIL: 55.0, NVML_GPM_METRIC_DRAM_BW_UTIL: 33.0,
                  NVML_GPM_METRIC_GRAPHICS_UTIL: 90.0, NVML_GPM_METRIC_PCIE_TX_PER_SEC: 12.5,
                  NVML_GPM_METRIC_PCIE_RX_PER_SEC: 3000.0}
        for m in mg.metrics[:mg.numMetrics]:
            m.value, m.nvmlReturn = values[m.metricId], 0
        return mg

    @staticmethod
    def c_nvmlGpmMetricsGet_t():  # noqa: N802 - pynvml's name
        return SimpleNamespace(version=0, numMetrics=0, sample1=None, sample2=None,
                               metrics=[SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)])
