"""Task SDK: training and inference code tells the local agent how it is doing.

Standard library only (tests/foundation/test_sdk.py checks it), so a training job can import it
without the agent's dependencies; every call is fire-and-forget over a Unix datagram
socket and never blocks or raises in the caller. With no agent listening the
SDK notices once and stays quiet for ``RETRY_S`` (a call then costs well under
a microsecond). The agent stamps the sender's pid and uid from the kernel's
peer credentials, so a task cannot report for someone else's.

    from gpuwarden.sdk import Task
    task = Task()                       # label from $GPUWARDEN_TASK, else the agent's attribution
    for batch in loader:
        with task.step() as s:           # step time; mark phases inside
            with s.data(): batch = next(it)
            loss = model(batch); loss.backward()
            with s.comm(): allreduce()
    with task.checkpoint(): save()
"""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import contextmanager
from typing import Any, Iterator

DEFAULT_SOCKET = "/run/gpuwarden/agent.sock"
RETRY_S = 1.0


class _Step:
    __slots__ = ("data_wait_s", "comm_s")

    def __init__(self) -> None:
        self.data_wait_s = 0.0
        self.comm_s = 0.0

    @contextmanager
    def data(self) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.data_wait_s += time.perf_counter() - t

    @contextmanager
    def comm(self) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.comm_s += time.perf_counter() - t


class Task:
    """One running task. All methods are safe to call with no agent present."""

    def __init__(self, task: str | None = None, task_id: str | None = None,
                 socket_path: str | None = None) -> None:
        self.task = task or os.environ.get("GPUWARDEN_TASK")
        self.task_id = task_id or os.environ.get("GPUWARDEN_TASK_ID")
        self.path = socket_path or os.environ.get("GPUWARDEN_SOCKET", DEFAULT_SOCKET)
        self._sock: socket.socket | None = None
        self._quiet_until = 0.0
        self._step = 0
        self.dropped = 0

    # ------------------------------------------------------------------ plain calls

    def report_step(self, step_time_s: float, *, data_wait_s: float | None = None,
                    comm_s: float | None = None, step: int | None = None) -> None:
        self._step = step if step is not None else self._step + 1
        self._send("step", step=self._step, step_time_s=step_time_s, data_wait_s=data_wait_s, comm_s=comm_s)

    def checkpoint_begin(self) -> None:
        self._send("checkpoint_begin", step=self._step)

    def checkpoint_end(self) -> None:
        self._send("checkpoint_end", step=self._step)

    def oom(self, message: str = "") -> None:
        self._send("oom", message=message)

    def exit(self, code: int, message: str = "") -> None:
        self._send("exit", exit_code=code, message=message)

    def throughput(self, value: float, unit: str = "samples/s") -> None:
        self._send("throughput", throughput=value, throughput_unit=unit)

    def model(self, params: float, *, layers: int | None = None, hidden: int | None = None,
              seq_len: int | None = None, mode: str | None = None) -> None:
        """What this task trains or serves, once at start: ``report usage`` then gives its MFU from
        its ``throughput(..., unit="tokens/s")``. Model FLOPs per token follow ``mode``:
        ``"train"`` 6N, ``"serve"`` 2N (a forward pass), each plus its attention term when layers,
        hidden size and sequence length (the context) are given. Unset: training, unless the task
        reports ``ttft`` or ``latency`` (a server)."""
        self._send("model", model_params=params, model_layers=layers, model_hidden=hidden, model_seq_len=seq_len,
                   model_mode=mode)

    def ttft(self, seconds: float) -> None:
        self._send("ttft", ttft_s=seconds)

    def latency(self, seconds: float) -> None:
        self._send("latency", latency_s=seconds)

    # ------------------------------------------------------------------ context managers

    @contextmanager
    def step(self) -> Iterator[_Step]:
        s, t = _Step(), time.perf_counter()
        try:
            yield s
        finally:
            self.report_step(time.perf_counter() - t, data_wait_s=s.data_wait_s, comm_s=s.comm_s)

    @contextmanager
    def checkpoint(self) -> Iterator[None]:
        self.checkpoint_begin()
        try:
            yield
        finally:
            self.checkpoint_end()

    # ------------------------------------------------------------------ transport

    def _send(self, kind: str, **fields: Any) -> None:
        now = time.time()
        if now < self._quiet_until:
            return
        msg = {"kind": kind, "ts": now}
        if self.task:
            msg["task"] = self.task
        if self.task_id:
            msg["task_id"] = self.task_id
        msg.update((k, v) for k, v in fields.items() if v is not None and v != "")
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.setblocking(False)
            self._sock.sendto(json.dumps(msg, separators=(",", ":")).encode(), self.path)
        except BlockingIOError:
            self.dropped += 1  # agent busy (buffer full): drop this one, never block
        except (OSError, TypeError, ValueError):
            self.dropped += 1
            self._quiet_until = now + RETRY_S  # no agent: stay quiet for a while
