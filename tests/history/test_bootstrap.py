"""Baselines bootstrapped from a real Prometheus (Debian's, started by scripts/prometheus-local on
loopback) that scrapes a real agent running the simulator, checked against the same period's
recording bootstrapped through stage 1 (issue #18, defect 7: a new site saw "learning" for two weeks)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwarden.app.settings import load_settings
from gpuwarden.app.standalone import LIVE_STATE, STATE_NS
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine
from tests.history.builders import gw

REPO = Path(__file__).resolve().parents[2]
#: Minutes of history squeezed into seconds: 5 s summaries, a 10 s observation period.
ENGINE = ("engine:\n  bucket: 1s\n  summary_interval: 5s\n  observation_period: 10s\n"
          "  baseline_min_samples: 3\n  baseline_refresh: 1s\n")


def _config(tmp: Path, name: str, port: int) -> Path:
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(f"spool:\n  path: {tmp / name / 'spool.db'}\nagent:\n  metrics_port: {port}\n{ENGINE}")
    return cfg


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _util_baselines(cfg: Path) -> dict[str, float]:
    settings = load_settings(cfg)
    engine = Engine(config=settings.engine)
    with Spool(settings.spool.path) as spool:
        engine.load_all(spool.kv_get(STATE_NS, LIVE_STATE))
    return {c: b.median for c in engine.classes.classes() if (b := engine.classes.baseline(c)["util_gpu"])}


def _wait_scrapes(url: str, t0: float, n: int) -> None:
    """Until Prometheus holds ``n`` scrapes since ``t0`` of every GPU's utilization: a wait on them,
    not a fixed 32 s (#33: scrapes come late on a busy machine); the bound only catches a hang."""
    import json
    import urllib.parse
    import urllib.request

    while True:
        since = max(1, int(time.time() - t0))
        query = urllib.parse.urlencode({"query": f"count_over_time(DCGM_FI_DEV_GPU_UTIL[{since}s])"})
        with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=60) as r:
            got = [int(float(x["value"][1])) for x in json.load(r)["data"]["result"]]
        if len(got) == 2 and min(got) >= n:  # the agent's 2 GPUs
            return
        assert time.time() - t0 < 600, f"scrapes since the start: {got}"
        time.sleep(1)


@pytest.mark.prometheus
def test_bootstrap_from_a_real_prometheus_scraping_an_agent(tmp_path: Path) -> None:
    port = _free_port()
    agent_cfg = _config(tmp_path, "agent", port)
    recording = tmp_path / "agent.jsonl"
    agent = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(agent_cfg),
                              "--simulate", "healthy", "--nodes", "1", "--gpus", "2", "--output", str(recording)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    env = {**os.environ, "PROMETHEUS_LOCAL_DIR": str(tmp_path / "prometheus")}
    local = [sys.executable, str(REPO / "scripts" / "prometheus-local")]
    try:
        started = subprocess.run([*local, "start", "--target", f"127.0.0.1:{port}", "--interval", "1s"],
                                 capture_output=True, text=True, timeout=300, env=env)
        assert started.returncode == 0, started.stderr
        url = started.stdout.strip().splitlines()[-1]
        t0 = time.time()
        _wait_scrapes(url, t0, 32)  # six 5 s summary intervals of scrapes
        out = gw("baseline", "--config", str(_config(tmp_path, "prom", port)), "bootstrap", "--from-prometheus",
                 url, "--since", str(int(t0)), "--until", str(int(time.time())), "--step", "1s")
        assert out.returncode == 0, out.stderr
    finally:
        subprocess.run([*local, "stop"], capture_output=True, env=env, timeout=60)
        agent.terminate()
        agent.wait(timeout=120)
    assert "task summaries (5 s windows)" in out.stdout and "baseline util" in out.stdout, out.stdout
    from_prometheus = _util_baselines(_config(tmp_path, "prom", port))
    assert from_prometheus, out.stdout
    # The same period through stage 1, from the agent's own recording: the same classes and
    # nearly the same baseline (instant values per step against bucket means).
    file_cfg = _config(tmp_path, "file", port)
    out = gw("baseline", "--config", str(file_cfg), "bootstrap", "--from-file", str(recording),
             "--since", str(int(t0)), "--until", str(int(time.time())))
    assert out.returncode == 0, out.stderr
    from_file = _util_baselines(file_cfg)
    assert from_prometheus.keys() == from_file.keys()
    for cls, util in from_prometheus.items():
        assert util == pytest.approx(from_file[cls], abs=5.0), (cls, from_prometheus, from_file)
    # A second bootstrap into the same spool would replace what is there: it must be asked for.
    again = gw("baseline", "--config", str(file_cfg), "bootstrap", "--from-file", str(recording))
    assert again.returncode == 2 and "--replace" in again.stderr


def test_a_prometheus_that_is_not_there_is_a_clear_error(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "x", _free_port())
    out = gw("baseline", "--config", str(cfg), "bootstrap", "--from-prometheus", f"http://127.0.0.1:{_free_port()}")
    assert out.returncode == 1 and "ConnectError" in out.stderr, out.stderr
