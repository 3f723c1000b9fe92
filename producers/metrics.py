"""Prometheus ``/metrics`` for the agent (off by default), named like dcgm-exporter.

Names and labels follow dcgm-exporter (``DCGM_FI_*``; labels ``gpu``, ``UUID``,
``modelName``, ``Hostname``) so existing Grafana dashboards work; the per-process
memory and XID count are ours (``gpuwarden_*``) with user/task/pod labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from gpuwarden.contract import GpuEvent, NodeSnapshot

_GPU = ("gpu", "UUID", "modelName", "Hostname")
_MIB = 1 << 20
#: metric name -> (help, GpuSample field, scale)
_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (%)", "util_gpu", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("memory utilization (%)", "util_memory", 1),
    "DCGM_FI_DEV_FB_USED": ("framebuffer used (MiB)", "mem_used_bytes", 1 / _MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("framebuffer total (MiB)", "mem_total_bytes", 1 / _MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("GPU temperature (C)", "temp_gpu_c", 1),
    "DCGM_FI_DEV_MEMORY_TEMP": ("HBM temperature (C)", "temp_memory_c", 1),
    "DCGM_FI_DEV_POWER_USAGE": ("power draw (W)", "power_w", 1),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power limit (W)", "power_limit_w", 1),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF": ("default power limit (W)", "power_default_limit_w", 1),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy since driver load (mJ)", "energy_mj", 1),
    "DCGM_FI_DEV_SM_CLOCK": ("SM clock (MHz)", "clock_sm_mhz", 1),
    "DCGM_FI_DEV_MEM_CLOCK": ("memory clock (MHz)", "clock_mem_mhz", 1),
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": ("clock-event reasons bitmask", "clock_event_reasons", 1),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("PCIe replays", "pcie_replay_counter", 1),
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": ("volatile corrected ECC errors", "ecc_volatile_corrected", 1),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("volatile uncorrected ECC errors", "ecc_volatile_uncorrected", 1),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("rows remapped for corrected errors", "remapped_rows_corrected", 1),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": ("rows remapped for uncorrected errors", "remapped_rows_uncorrected", 1),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("row remap pending (1/0)", "remap_pending", 1),
    "DCGM_FI_PROF_SM_ACTIVE": ("SM active ratio (GPM)", "sm_active", 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("SM occupancy ratio (GPM)", "sm_occupancy", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor pipe active ratio (GPM)", "tensor_active", 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("DRAM active ratio (GPM)", "dram_active", 0.01),
}


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.gauges = {n: Gauge(n, h, _GPU, registry=self.registry) for n, (h, _, _) in _FIELDS.items()}
        self.proc_mem = Gauge("gpuwarden_process_gpu_memory_bytes", "GPU memory held by a process",
                              ("gpu", "Hostname", "pid", "user", "task", "pod", "namespace", "hpc_job"),
                              registry=self.registry)
        self.xids = Counter("gpuwarden_xid", "XID events seen", ("gpu", "Hostname", "err_code"),
                            registry=self.registry)

    def observe(self, records: Iterable[Any]) -> None:
        for r in records:
            if isinstance(r, NodeSnapshot):
                self._snapshot(r)
            elif isinstance(r, GpuEvent) and r.kind == "xid":
                self.xids.labels(str(r.gpu_index), r.node, str(r.code)).inc(r.count)

    def _snapshot(self, snap: NodeSnapshot) -> None:
        for g in snap.gpus.rows():
            labels = (str(g.index), g.uuid, g.name or "", snap.node)
            for name, (_, field, scale) in _FIELDS.items():
                v = getattr(g, field)
                gauge = self.gauges[name]
                if v is None:
                    try:
                        gauge.remove(*labels)
                    except KeyError:
                        pass
                else:
                    gauge.labels(*labels).set(float(v) * scale)
        self.proc_mem.clear()
        for p in snap.processes.rows():
            if p.used_memory_bytes is not None:
                self.proc_mem.labels(str(p.gpu_index), snap.node, str(p.pid), p.user or "", p.task or "",
                                     p.pod_name or "", p.pod_namespace or "", p.slurm_job_id or "",
                                     ).set(p.used_memory_bytes)

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        server, thread = start_http_server(port, addr=addr, registry=self.registry)
        return server
