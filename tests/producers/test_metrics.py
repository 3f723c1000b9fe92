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


def test_scrape_shows_gpu_and_process_metrics():
    m = AgentMetrics()
    sim = Simulator("xid-79", gpus=8, start_ts=1_700_000_000, tick_s=10, onset_s=50)
    for _ in range(10):
        m.observe(sim.step())
    port = free_port()
    server = serve(m.registry, port, bare_counters=COUNTERS)
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
