"""Prometheus ``/metrics`` for the agent (off by default), named like dcgm-exporter.

Names, types and labels follow dcgm-exporter (``DCGM_FI_*``; labels ``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``, and on
Kubernetes ``pod``/``namespace``/``container`` from the kubelet's pod-resources API,
:mod:`gpuwarden.producers.podresources`) so a site can swap it in for dcgm-exporter and keep its
dashboards. Its cumulative fields are counters without a ``_total`` suffix, as dcgm-exporter's
are (:data:`COUNTERS`). The per-process memory and XID count are ours (``gpuwarden_*``), and so
are the serving engines it scrapes (``gpuwarden_inference_*``, :mod:`gpuwarden.producers.servingmetrics`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuwarden.contract import GpuEvent, InferenceMetrics, NodeSnapshot
from gpuwarden.producers.podresources import NO_POD, PodRef
from gpuwarden.producers.servingmetrics import ServingSeries
from gpuwarden.producers.xid import lookup

#: The labels of every per-GPU series, in dcgm-exporter's names.
GPU_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION",
              "container", "namespace", "pod")
_MIB = 1 << 20
#: metric name -> (help, GpuSample field, scale)
_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("GPU utilization (%)", "util_gpu", 1),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("memory utilization (%)", "util_memory", 1),
    "DCGM_FI_DEV_FB_USED": ("framebuffer used (MiB)", "mem_used_bytes", 1 / _MIB),
    "DCGM_FI_DEV_FB_FREE": ("framebuffer free (MiB)", "mem_free_bytes", 1 / _MIB),
    "DCGM_FI_DEV_FB_TOTAL": ("framebuffer total (MiB)", "mem_total_bytes", 1 / _MIB),
    "DCGM_FI_DEV_FB_RESERVED": ("framebuffer reserved by the driver (MiB)", "mem_reserved_bytes", 1 / _MIB),
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
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("row remapping failed (1/0)", "remap_failure", 1),
    "DCGM_FI_PROF_SM_ACTIVE": ("SM active ratio (GPM)", "sm_active", 0.01),
    "DCGM_FI_PROF_SM_OCCUPANCY": ("SM occupancy ratio (GPM)", "sm_occupancy", 0.01),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("tensor pipe active ratio (GPM)", "tensor_active", 0.01),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("DRAM active ratio (GPM)", "dram_active", 0.01),
}


#: dcgm-exporter's default fields the contract carries no column for: the source reads them for
#: /metrics alone (``dcgm_fields(node, sample)`` of the NVML collector and of the simulator). The
#: PCIe ones are rates (bytes/s), as DCGM's profiling fields are; so is the NVLink bandwidth
#: (DCGM's MiB/s), which dcgm-exporter nonetheless types counter (:data:`COUNTERS`): read it as it
#: is, never through ``rate()``. The vGPU licence: 1 licensed, 0 not (or no vGPU licensing: bare metal).
DCGM_ONLY = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "ratio of time the graphics engine is active (GPM)",
    "DCGM_FI_DEV_ENC_UTIL": "encoder utilization (%)",
    "DCGM_FI_DEV_DEC_UTIL": "decoder utilization (%)",
    "DCGM_FI_PROF_PCIE_TX_BYTES": "PCIe bytes transmitted per second, headers and payload",
    "DCGM_FI_PROF_PCIE_RX_BYTES": "PCIe bytes received per second, headers and payload",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "NVLink data received and transmitted over all links, MiB/s as "
                                          "DCGM computes it (a rate, typed counter as dcgm-exporter does)",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS": "vGPU license status (1 licensed, 0 not licensed or no vGPU licensing)",
}
#: ``dcgm_fields(node, sample)`` → {DCGM name: value} for one GPU.
DcgmFields = Callable[[str, Any], Mapping[str, float]]

#: dcgm-exporter's counters (default-counters.csv): typed counter, named without ``_total``.
COUNTERS = frozenset({"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
                      "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
                      "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                      "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"})
XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
def xid_labels(code: float) -> dict[str, str]:
    """``err_code`` and ``err_msg`` of the XID series, as dcgm-exporter labels them (0: none yet);
    the message is the XID catalogue's (:mod:`gpuwarden.producers.xid`)."""
    n = int(code)
    return {"err_code": str(n), "err_msg": "" if n == 0 else lookup(n).meaning}

#: ``owner(uuid, index)`` → the container holding the GPU (:data:`NO_POD` off Kubernetes).
Owner = Callable[[str, int], PodRef]


def _no_pod(uuid: str, index: int) -> PodRef:
    return NO_POD


class AgentMetrics:
    """The agent's registry: per-GPU series rebuilt from each snapshot, read by scrapes as a whole."""

    def __init__(self, bus_ids: Mapping[int, str] | None = None, owner: Owner | None = None,
                 dcgm: DcgmFields | None = None) -> None:
        """``bus_ids``: GPU index → PCI bus id (from the source); ``owner``: who holds a GPU
        (:meth:`gpuwarden.producers.podresources.PodResources.owner`); ``dcgm``: the source's
        :data:`DCGM_ONLY` readings of a GPU."""
        self.registry = CollectorRegistry()
        self.dcgm = dcgm
        self.bus_ids = bus_ids or {}
        self.owner = owner or _no_pod
        self._gpus: dict[str, list[tuple[tuple[str, ...], dict[str, float]]]] = {}  # node → its GPUs' series
        self._xid: dict[tuple[str, int], int] = {}  # (node, GPU index) → last XID code
        self._lock = threading.Lock()
        self.registry.register(_GpuSeries(self))
        self.serving = ServingSeries()
        self.registry.register(self.serving)
        self.proc_mem = Gauge("gpuwarden_process_gpu_memory_bytes", "GPU memory held by a process",
                              ("gpu", "Hostname", "pid", "user", "task", "pod", "namespace", "hpc_job"),
                              registry=self.registry)
        self.xids = Counter("gpuwarden_xid", "XID events seen", ("gpu", "Hostname", "err_code"),
                            registry=self.registry)
        self.publisher: Any = None  # set by publishing(): the spool-first Kafka publisher, if any

    def publishing(self, publisher: Any) -> None:
        """Serve ``publisher``'s state (:class:`gpuwarden.producers.publisher.Publisher`): records
        waiting in the spool, the oldest one's age, publish errors by cause."""
        if self.publisher is None and publisher is not None:
            self.registry.register(_PublishSeries(publisher))
        self.publisher = publisher

    def kmsg(self, available: bool) -> None:
        """Whether the kernel log is read (live NVML agents only: the simulator has none)."""
        Gauge("gpuwarden_agent_kmsg_available", "1 when the agent reads the kernel log (/dev/kmsg: XIDs "
              "NVML's events miss, driver messages); 0: kmsg unavailable, XIDs from NVML events only",
              registry=self.registry).set(1 if available else 0)

    def ready(self) -> str | None:
        """``/-/ready``: None while the agent publishes (or writes a file), else why not."""
        return None if self.publisher is None else self.publisher.stalled()

    def observe(self, records: Iterable[Any]) -> None:
        for r in records:
            if isinstance(r, NodeSnapshot):
                self._snapshot(r)
            elif isinstance(r, GpuEvent) and r.kind == "xid":
                self.xids.labels(str(r.gpu_index), r.node, str(r.code)).inc(r.count)
                if r.gpu_index is not None and r.code is not None:
                    self._xid[r.node, r.gpu_index] = r.code
            elif isinstance(r, InferenceMetrics):
                self.serving.observe(r)

    def _snapshot(self, snap: NodeSnapshot) -> None:
        gpus = []
        for g in snap.gpus.rows():
            who = self.owner(g.uuid, g.index)
            labels = (str(g.index), g.uuid, self.bus_ids.get(g.index, ""), f"nvidia{g.index}", g.name or "",
                      snap.node, snap.driver_version or "", who.container, who.namespace, who.pod)
            values = {name: float(v) * scale for name, (_, field, scale) in _FIELDS.items()
                      if (v := _value(g, field)) is not None}
            if self.dcgm is not None:
                values.update((k, float(v)) for k, v in self.dcgm(snap.node, g).items() if k in DCGM_ONLY)
            values[XID_ERRORS] = float(self._xid.get((snap.node, g.index), 0))
            gpus.append((labels, values))
        with self._lock:
            self._gpus[snap.node] = gpus
        self.proc_mem.clear()
        for p in snap.processes.rows():
            if p.used_memory_bytes is not None:
                self.proc_mem.labels(str(p.gpu_index), snap.node, str(p.pid), p.user or "", p.task or "",
                                     p.pod_name or "", p.pod_namespace or "", p.slurm_job_id or "",
                                     ).set(p.used_memory_bytes)

    def series(self) -> list[tuple[tuple[str, ...], dict[str, float]]]:
        with self._lock:
            return [gpu for gpus in self._gpus.values() for gpu in gpus]


def _value(g: Any, field: str) -> float | None:
    """A sample's field; free framebuffer is what the total leaves over the used (NVML's v1 reading)."""
    if field == "mem_free_bytes":
        return None if g.mem_total_bytes is None or g.mem_used_bytes is None else g.mem_total_bytes - g.mem_used_bytes
    return getattr(g, field)


class _PublishSeries(Collector):
    """The agent's publish state, read from the publisher at scrape time."""

    def __init__(self, publisher: Any) -> None:
        self.publisher = publisher

    def collect(self) -> Iterator[Metric]:
        p = self.publisher
        now = p.clock()
        yield GaugeMetricFamily("gpuwarden_agent_spool_pending_records", "records in the spool not yet "
                                "published to Kafka", value=p.waiting)
        yield GaugeMetricFamily("gpuwarden_agent_spool_oldest_age_seconds", "age of the oldest record waiting "
                                "in the spool (0: none waits)",
                                value=0.0 if p.oldest_ts is None or not p.waiting else max(0.0, now - p.oldest_ts))
        errors = CounterMetricFamily("gpuwarden_agent_publish_errors", "failed sends to Kafka, by cause "
                                     "(timeout, connection, auth, too_large, broker, other)", labels=("cause",))
        for c in ("timeout", "connection", "auth", "too_large", "broker", "other"):
            errors.add_metric((c,), p.errors.get(c, 0))
        yield errors
        yield CounterMetricFamily("gpuwarden_agent_published_records", "records Kafka acknowledged",
                                  value=p.published)
        if p.published_at is not None:
            yield GaugeMetricFamily("gpuwarden_agent_last_publish_timestamp_seconds", "wall time of the last "
                                    "acknowledged send", value=p.published_at)


class _GpuSeries(Collector):
    """Every per-GPU family, built at scrape time from the last snapshot of each node."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        rows = self.metrics.series()
        docs = {**{n: h for n, (h, _, _) in _FIELDS.items()}, **DCGM_ONLY,
                XID_ERRORS: "last XID error code seen (0: none)"}
        for name, doc in docs.items():
            family = Metric(name, doc, "counter") if name in COUNTERS else GaugeMetricFamily(name, doc, labels=GPU_LABELS)
            for labels, values in rows:
                if name in values:
                    extra = xid_labels(values[name]) if name == XID_ERRORS else {}
                    family.add_sample(name, {**dict(zip(GPU_LABELS, labels)), **extra}, values[name])
            yield family
