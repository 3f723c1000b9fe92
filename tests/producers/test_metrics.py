"""Prometheus /metrics over real HTTP on loopback: dcgm-exporter names, nulls not exported."""

from __future__ import annotations

import socket
import urllib.request

from gpuwarden.producers.metrics import AgentMetrics
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
    server = m.serve(port)
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="sim-node-00",UUID="GPU-' in body
    assert 'modelName="NVIDIA H200"' in body and "DCGM_FI_PROF_SM_ACTIVE{" in body
    assert any(line.startswith("DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF{") and line.endswith(" 700.0") for line in body.splitlines())
    lost = [line for line in body.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{") and 'gpu="4"' in line]
    assert lost == []  # the GPU that fell off the bus reads null: removed, not 0
    assert 'gpuwarden_xid_total{Hostname="sim-node-00",err_code="79",gpu="4"} 1.0' in body
    assert 'gpuwarden_process_gpu_memory_bytes{' in body and 'user="chen"' in body
