"""Agent side of the task SDK: a Unix datagram socket whose senders the kernel names.

``SO_PASSCRED`` makes the kernel attach each sender's real pid/uid/gid
(``SCM_CREDENTIALS``) to every datagram; the agent stamps those onto the
TaskMetric and ignores whatever the message claims. A message that is not a
valid metric is counted and logged (reason only), never fatal.
"""

from __future__ import annotations

import json
import logging
import os
import select
import socket
import threading
import struct
from collections.abc import Callable
from typing import Any

from gpuwarden.contract import ContractError, TaskMetric, describe
from pydantic import ValidationError

log = logging.getLogger(__name__)
_CREDS = struct.Struct("3i")
_ALLOWED = {"kind", "ts", "task", "task_id", "step", "step_time_s", "data_wait_s", "comm_s",
            "throughput", "throughput_unit", "ttft_s", "latency_s", "exit_code", "message",
            "model_params", "model_layers", "model_hidden", "model_seq_len", "model_mode"}


class TaskReceiver:
    def __init__(self, path: str, node: str, attributor: Callable[[int], Any] | None = None) -> None:
        self.path, self.node, self.attribute = path, node, attributor
        self.rejected = 0
        self._thread: threading.Thread | None = None
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        if os.path.exists(path):
            os.unlink(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.sock.bind(path)
        os.chmod(path, 0o666)  # any local user may report; the kernel says who they are
        self.sock.setblocking(False)

    def start(self) -> None:
        """Receive in a thread: the kernel queues only ~10 datagrams (net.unix.max_dgram_qlen)."""
        self._stop = threading.Event()
        self._buffer: list[TaskMetric] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="task-sdk", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self.sock], [], [], 0.2)
            if ready:
                got = self._receive()
                with self._lock:
                    self._buffer.extend(got)

    def drain(self) -> list[TaskMetric]:
        """Metrics received since the last call (bad datagrams counted and dropped)."""
        if self._thread is None:
            return self._receive()
        with self._lock:
            out, self._buffer = self._buffer, []
        return out

    def _receive(self, limit: int = 10_000) -> list[TaskMetric]:
        out: list[TaskMetric] = []
        for _ in range(limit):
            try:
                data, anc, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(_CREDS.size))
            except BlockingIOError:
                break
            pid = uid = None
            for level, kind, cdata in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid, uid, _ = _CREDS.unpack(cdata[:_CREDS.size])
            try:
                out.append(self.parse(data, pid, uid))
            except ContractError as e:
                self.rejected += 1
                log.warning("task metric from pid %s rejected: %s", pid, e)
        return out

    def parse(self, data: bytes, pid: int | None, uid: int | None) -> TaskMetric:
        try:
            msg = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise ContractError("not JSON", ["record"]) from None
        if not isinstance(msg, dict):
            raise ContractError("expected a JSON object", ["record"])
        fields = {k: v for k, v in msg.items() if k in _ALLOWED}
        if pid is not None and (not fields.get("task") or not fields.get("task_id")) and self.attribute:
            a = self.attribute(pid)
            fields["task"] = fields.get("task") or a.task
            fields["task_id"] = fields.get("task_id") or a.task_id
        try:
            return TaskMetric(node=self.node, pid=pid, uid=uid, **fields)
        except ValidationError as e:
            raise ContractError(*describe(e)) from None

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=2)
        self.sock.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
