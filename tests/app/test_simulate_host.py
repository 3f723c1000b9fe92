"""Trying gpuwarden without a GPU (#32, point 5): a simulation still takes what the real host has.
``gpuwarden agent --simulate`` and ``gpuwarden run --simulate``, through the CLI in a subprocess,
receive the task SDK on ``agent.socket_path`` (the training callbacks' socket) and scrape
``agent.inference.targets`` (here a fake vLLM rendered by the real prometheus_client)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuwarden.sdk import Task
from tests.fakes.vllm import FakeVllm, Request
from tests.hang import HANG_S

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture
def vllm():
    server = FakeVllm([MODEL])
    yield server
    server.close()


def config(tmp_path: Path, vllm: FakeVllm) -> Path:
    path = tmp_path / "gpuwarden.yaml"
    path.write_text(f"""
spool:
  path: {tmp_path / 'spool.db'}
agent:
  socket_path: {tmp_path / 'sdk' / 'agent.sock'}
  inference:
    interval: 1s
    targets:
      - {{url: "{vllm.url}", engine: vllm, service: chat}}
""")
    return path




def serve_and_report(p: subprocess.Popen, socket: Path, vllm: FakeVllm, written: Path) -> None:
    """While the process runs: a training loop's steps on the socket, requests on the fake vLLM,
    until ``written`` holds the task's metrics and the model's (a wait on them, #33: a fixed 6 s
    could end before the first scrape on a busy machine)."""
    end = time.monotonic() + HANG_S
    while not socket.exists():
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
        assert time.monotonic() < end, "the task SDK socket never appeared"
        time.sleep(0.1)
    task = Task(task="resnet-try", task_id="try-1", socket_path=str(socket))

    def arrived() -> bool:
        text = written.read_text() if written.exists() else ""
        return "resnet-try" in text and '"inference_metrics/1"' in text and MODEL in text

    while not arrived():
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
        assert time.monotonic() < end, "the task's and the model's metrics never arrived"
        task.report_step(0.25, data_wait_s=0.01)
        vllm.metrics.finish(MODEL, Request(ttft=0.2, itl=[0.02, 0.03], e2e=1.0, queue=0.01, prompt_tokens=100))
        time.sleep(0.3)


def stop(p: subprocess.Popen) -> str:
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        p.kill()
        raise
    assert p.returncode == 0, err
    return err


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_agent_simulate_receives_the_task_sdk_and_scrapes_inference_targets(tmp_path, vllm):
    out = tmp_path / "out.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(config(tmp_path, vllm)),
                          "--simulate", "healthy", "--nodes", "1", "--gpus", "1", "--output", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        serve_and_report(p, tmp_path / "sdk" / "agent.sock", vllm, out)
    finally:
        err = stop(p)
    assert "task SDK socket" in err and "scraping" in err, err  # both said at start
    got = records(out)
    tasks = [r for r in got if r["schema"] == "task_metrics/1"]
    assert tasks, sorted({r["schema"] for r in got})
    node = next(r["node"] for r in got if r["schema"] == "node_snapshot/2")
    assert all(r["node"] == node for r in tasks)  # the simulated node's name
    assert "resnet-try" in json.dumps(tasks)
    inference = [r for r in got if r["schema"] == "inference_metrics/1"]
    assert inference and all(r["node"] == node for r in inference), sorted({r["schema"] for r in got})
    assert MODEL in json.dumps(inference)


def test_run_simulate_scrapes_inference_targets_and_receives_the_task_sdk(tmp_path, vllm):
    recorded = tmp_path / "recorded.jsonl"
    p = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "run", "--config", str(config(tmp_path, vllm)),
                          "--simulate", "healthy", "--nodes", "1", "--gpus", "1", "--json", "--record", str(recorded)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        serve_and_report(p, tmp_path / "sdk" / "agent.sock", vllm, recorded)
    finally:
        err = stop(p)
    assert "scraping" in err, err
    got = records(recorded)
    schemas = {r["schema"] for r in got}
    assert "inference_metrics/1" in schemas and MODEL in json.dumps([r for r in got if r["schema"] == "inference_metrics/1"]), schemas
    assert {"task_metric/1", "task_metrics/1"} & schemas and "resnet-try" in recorded.read_text(), schemas


def test_a_simulated_span_says_it_does_not_scrape(tmp_path, vllm):
    p = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(config(tmp_path, vllm)),
                        "--simulate", "healthy", "--nodes", "1", "--gpus", "1", "--duration", "1m",
                        "--output", str(tmp_path / "span.jsonl")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "agent.inference.targets are not scraped" in p.stderr


def test_a_simulation_never_takes_over_a_running_agent_s_socket(tmp_path, caplog):
    """On a GPU host whose agent runs, ``gpuwarden run --simulate`` must not unlink its socket."""
    import socket as sk

    from gpuwarden.producers.agent import simulated_extras
    from gpuwarden.producers.config import AgentConfig
    from gpuwarden.producers.simulator import Simulator

    path = tmp_path / "agent.sock"
    with sk.socket(sk.AF_UNIX, sk.SOCK_DGRAM) as real:
        real.bind(str(path))
        cfg = AgentConfig(socket_path=path)
        sim = Simulator("healthy", nodes=1, gpus=1, start_ts=time.time(), tick_s=1.0)
        assert simulated_extras(cfg, sim, live=True) == []
        assert "is in use" in caplog.text
        with sk.socket(sk.AF_UNIX, sk.SOCK_DGRAM) as client:
            client.sendto(b"{}", str(path))  # still the real one's
        assert real.recv(10) == b"{}"
    extras = simulated_extras(cfg, sim, live=True)  # the file a dead agent left: taken
    try:
        assert len(extras) == 1 and path.is_socket()
    finally:
        for x in extras:
            x.close()
