"""The Lightning and Hugging Face callbacks in real training: tiny models built from a config (no
download), trained on CPU in the frameworks venv, each in its own process, reporting through the
task SDK to the agent's own receiver (producers/taskrecv.py), which stamps the kernel's pid."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuwarden.contract import TaskMetric
from gpuwarden.producers.taskrecv import TaskReceiver

pytestmark = pytest.mark.frameworks

HERE = Path(__file__).resolve().parent
STEPS, SLEEP_S = 6, 0.02  # as in train_lightning.py and train_transformers.py


def train(python: str, script: str, tmp_path: Path, failing_id: str) -> tuple[int, dict, list[TaskMetric], int]:
    """Run ``script``; its exit status, the JSON line it printed, what the receiver got, its pid."""
    receiver = TaskReceiver(str(tmp_path / "agent.sock"), "node-1")
    receiver.start()
    env = {**os.environ, "GPUWARDEN_SOCKET": receiver.path, "GPUWARDEN_TASK": "tiny", "GPUWARDEN_TASK_ID": "tiny-1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    try:
        proc = subprocess.Popen([python, str(HERE / script), str(tmp_path / "out")], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        out, err = proc.communicate(timeout=600)
        got: list[TaskMetric] = []
        deadline = time.monotonic() + 300  # what the process sent last may still be in the socket's queue (a hang bound)
        while not any(m.task_id == failing_id and m.kind == "exit" for m in got) and time.monotonic() < deadline:
            got += receiver.drain()
            time.sleep(0.05)
    finally:
        receiver.close()
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{\"dropped\"")]
    assert printed, f"{script} printed nothing ({proc.returncode}): {err[-3000:]}"
    assert receiver.rejected == 0
    return proc.returncode, printed[0], got, proc.pid


def check_run(got: list[TaskMetric], pid: int, unit: str, batch: int) -> dict[str, list[TaskMetric]]:
    """The successful run's records are sane; returned by kind."""
    assert {m.pid for m in got} == {pid}  # the kernel's word, not the message's
    run = [m for m in got if m.task_id == "tiny-1"]
    kinds: dict[str, list[TaskMetric]] = {}
    for m in run:
        kinds.setdefault(m.kind.value, []).append(m)
    steps = kinds["step"]
    assert [m.step for m in steps] == list(range(1, STEPS + 1))
    assert all(0 <= m.data_wait_s <= m.step_time_s for m in steps)
    assert sum(m.data_wait_s for m in steps) >= (STEPS - 1) * SLEEP_S  # the loader sleeps SLEEP_S a batch
    assert [(m.kind.value, m.step) for m in run if m.kind.value.startswith("checkpoint")] == [
        ("checkpoint_begin", 3), ("checkpoint_end", 3), ("checkpoint_begin", 6), ("checkpoint_end", 6)]
    rates = kinds["throughput"]
    assert {m.throughput_unit for m in rates} == {unit}
    assert all(0 < m.throughput <= 2 * batch / min(s.step_time_s for s in steps) for m in rates)
    assert [(m.kind.value, m.exit_code) for m in run[-1:]] == [("exit", 0)]
    return kinds


def test_lightning_callback_reports_steps_checkpoints_throughput_and_exit(frameworks_python, tmp_path):
    rc, printed, got, pid = train(frameworks_python, "train_lightning.py", tmp_path, "lightning-fails")
    assert rc == 0 and printed["dropped"] == 0
    kinds = check_run(got, pid, "samples/s", batch=8)
    assert [(m.model_params, m.model_layers) for m in kinds["model"]] == [(printed["params"], None)]
    assert len(list((tmp_path / "out" / "ok").glob("*.ckpt"))) == 2  # what the checkpoint records bracket
    failed = [m for m in got if m.task_id == "lightning-fails"]
    assert [m.kind.value for m in failed] == ["model", "step", "throughput", "exit"]
    assert (failed[-1].exit_code, failed[-1].message) == (1, "RuntimeError: boom at the second batch")


def test_transformers_callback_reports_tokens_the_model_and_an_uncaught_exception(frameworks_python, tmp_path):
    rc, printed, got, pid = train(frameworks_python, "train_transformers.py", tmp_path, "transformers-fails")
    assert rc == 1 and printed["dropped"] == 0  # the second run's exception ends the process
    kinds = check_run(got, pid, "tokens/s", batch=4 * 16)
    model = kinds["model"]
    assert [(m.model_params, m.model_layers, m.model_hidden, m.model_seq_len) for m in model] == [
        (printed["params"], 2, 32, 16)]
    assert sorted(p.name for p in (tmp_path / "out" / "ok").glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-6"]
    failed = [m for m in got if m.task_id == "transformers-fails"]
    assert [m.kind.value for m in failed] == ["model", "step", "throughput", "exit"]
    assert (failed[-1].exit_code, failed[-1].message) == (1, "RuntimeError: boom in the third batch")
