"""Prometheus /metrics over real HTTP on loopback: dcgm-exporter names, nulls not exported."""

from __future__ import annotations

import socket
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.exposition import serve
from gpuwarden.producers.metrics import COUNTERS, AgentMetrics
from gpuwarden.producers.simulator import Simulator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def xid_79_served() -> tuple[int, object]:
    """(port, server): the agent's /metrics after 100 s of the xid-79 scenario on 8 GPUs."""
    sim = Simulator("xid-79", gpus=8, start_ts=1_700_000_000, tick_s=10, onset_s=50)
    m = AgentMetrics(dcgm=sim.dcgm_fields)
    for _ in range(10):
        m.observe(sim.step())
    port = free_port()
    return port, serve(m.registry, port, bare_counters=COUNTERS)


def test_scrape_shows_gpu_and_process_metrics():
    port, server = xid_79_served()
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    util = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert util["0"].labels["Hostname"] == "sim-node-00" and util["0"].labels["UUID"].startswith("GPU-")
    assert util["0"].labels["modelName"] == "NVIDIA H200" and util["0"].labels["DCGM_FI_DRIVER_VERSION"]
    assert "DCGM_FI_PROF_SM_ACTIVE{" in body
    assert any(line.startswith("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF{") and line.endswith(" 700.0") for line in body.splitlines())
    # dcgm-exporter's counters: typed counter under their own name (no _total), as it exposes them.
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in body
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in body and "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in body
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in body
    free = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_FREE"].samples}
    used = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_USED"].samples}
    total = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_TOTAL"].samples}
    assert free["0"] == total["0"] - used["0"] and "4" not in free
    # The last XID per GPU, 0 where none: the lost GPU keeps its 79 though its readings are gone.
    xid = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert xid["4"] == 79 and xid["0"] == 0 and len(xid) == 8
    lost = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'gpu="4"' in line]
    assert lost == []  # the GPU that fell off the bus reads null: removed, not 0
    assert 'gpuwarden_xid_total{Hostname="sim-node-00",err_code="79",gpu="4"} 1.0' in body
    assert 'gpuwarden_process_gpu_memory_bytes{' in body and 'user="chen"' in body


def _scrape(port: int, **headers: str) -> tuple[bytes, dict[str, str]]:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read(), dict(r.headers)


def test_dcgm_exporter_s_fields_xid_labels_and_prometheus_client_s_negotiation():
    """#32, point 4: FB_RESERVED and ROW_REMAP_FAILURE from the snapshot (the simulator's too), the
    XID series with dcgm-exporter's err_code/err_msg, OpenMetrics when asked (the bare dcgm counters
    typed unknown there, the format wanting *_total), gzip when taken, and no *_created series."""
    import gzip

    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families

    port, server = xid_79_served()
    try:
        text, headers = _scrape(port)
        om, om_headers = _scrape(port, Accept="application/openmetrics-text; version=1.0.0")
        zipped, zip_headers = _scrape(port, **{"Accept-Encoding": "gzip"})
        only = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?name[]=DCGM_FI_DEV_XID_ERRORS",
                                      timeout=5).read()
    finally:
        server.shutdown()
    body = text.decode()
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    reserved = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_FB_RESERVED"].samples}
    assert reserved["0"] > 0
    assert {s.value for s in fams["DCGM_FI_DEV_ROW_REMAP_FAILURE"].samples} == {0.0}
    # the fields the contract has no column for, from the simulator's dcgm_fields (GPU 4 is lost)
    for name in ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
                 "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"):
        assert fams[name].type == "gauge" and {s.labels["gpu"] for s in fams[name].samples} == \
            {str(i) for i in range(8)} - {"4"}, name
    util = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}
    active = {s.labels["gpu"]: s.value for s in fams["DCGM_FI_PROF_GR_ENGINE_ACTIVE"].samples}
    assert active["0"] == round(util["0"] / 100, 4)
    xid = {s.labels["gpu"]: s.labels for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert (xid["4"]["err_code"], xid["4"]["err_msg"]) == ("79", "GPU has fallen off the bus")
    assert (xid["0"]["err_code"], xid["0"]["err_msg"]) == ("0", "")
    assert "_created" not in body and "gpuwarden_xid_total{" in body
    # OpenMetrics: parsed by prometheus_client's strict parser, ends with # EOF
    assert om_headers["Content-Type"].startswith("application/openmetrics-text")
    assert om.decode().endswith("# EOF\n") and "_created" not in om.decode()
    om_fams = {f.name: f for f in om_families(om.decode())}
    assert om_fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert om_fams["gpuwarden_xid"].type == "counter"
    assert om_fams["DCGM_FI_DEV_XID_ERRORS"].samples
    # gzip
    assert zip_headers.get("Content-Encoding") == "gzip" and gzip.decompress(zipped) == text
    # one family asked for by name
    assert only.decode().count("# TYPE ") == 1 and "DCGM_FI_DEV_XID_ERRORS" in only.decode()


#: dcgm-exporter's default counters: every uncommented line of etc/default-counters.csv at
#: NVIDIA/dcgm-exporter@d5e5f51 (2026-05-12), (field, Prometheus type); 26 entries, the driver
#: version a label of every series.
DCGM_EXPORTER_DEFAULTS = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge"), ("DCGM_FI_DEV_MEM_CLOCK", "gauge"),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge"), ("DCGM_FI_DEV_GPU_TEMP", "gauge"),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge"), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter"),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter"), ("DCGM_FI_DEV_GPU_UTIL", "gauge"),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge"), ("DCGM_FI_DEV_ENC_UTIL", "gauge"), ("DCGM_FI_DEV_DEC_UTIL", "gauge"),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge"), ("DCGM_FI_DEV_FB_FREE", "gauge"), ("DCGM_FI_DEV_FB_USED", "gauge"),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge"), ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter"),
    ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge"), ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter"),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter"), ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge"),
    ("DCGM_FI_DRIVER_VERSION", "label"), ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge"), ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "gauge"), ("DCGM_FI_PROF_PCIE_RX_BYTES", "gauge"),
)


def _families(metrics: AgentMetrics) -> tuple[dict[str, object], str]:
    port = free_port()
    server = serve(metrics.registry, port, bare_counters=COUNTERS)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    return {f.name: f for f in text_string_to_metric_families(body)}, body


def test_every_dcgm_exporter_default_counter_by_name_and_type_from_nvml_and_the_simulator():
    """#32, point 6: all 26 entries of dcgm-exporter's default-counters.csv served under the same
    name and type (the driver version as a label), on every GPU, by the NVML collector (the fake
    NVML: a bare-metal H200 with NVLink) and by the simulator."""
    from tests.fakes.nvml import FakeGpu, FakeNvml

    from gpuwarden.producers.nvml import NvmlCollector

    assert len(DCGM_EXPORTER_DEFAULTS) == 26
    nvml = NvmlCollector(FakeNvml([FakeGpu(0), FakeGpu(1)]), node="n1", slow_in_thread=False, gpm_interval_s=0)
    from_nvml = AgentMetrics(dcgm=nvml.dcgm_fields)
    from_nvml.observe(nvml.step())
    sim = Simulator("healthy", gpus=2, start_ts=1_700_000_000, tick_s=10)
    from_sim = AgentMetrics(dcgm=sim.dcgm_fields)
    from_sim.observe(sim.step())
    for source, metrics in (("nvml", from_nvml), ("simulator", from_sim)):
        fams, body = _families(metrics)
        for name, kind in DCGM_EXPORTER_DEFAULTS:
            if kind == "label":
                assert {s.labels[name] for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples} != {""}, (source, name)
                continue
            assert f"# TYPE {name} {kind}\n" in body, (source, name)
            assert {s.labels["gpu"] for s in fams[name].samples} == {"0", "1"}, (source, name)
        nvlink = {s.value for s in fams["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"].samples}
        assert {s.value for s in fams["DCGM_FI_DEV_VGPU_LICENSE_STATUS"].samples} == {0.0}, source
        assert nvlink == {0.0} if source == "nvml" else min(nvlink) > 0, (source, nvlink)  # NVML: a first read
