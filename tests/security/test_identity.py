"""The task SDK socket stamps the kernel's credentials: a sender cannot claim another pid or uid.

A forked child drops to ``nobody`` (uid 65534), then (1) tries to send with
forged SCM_CREDENTIALS naming pid 1 / uid 0 — the kernel refuses — and (2) sends
a metric whose JSON claims pid 1 and uid 0: the agent's receiver records the
child's real pid and uid 65534.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import tempfile
import time

import pytest

from gpuwarden.producers.taskrecv import TaskReceiver

NOBODY = 65534


def child_sends(path: str, w: int) -> None:
    """Runs in the forked child: never returns."""
    status = {}
    try:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        claim = json.dumps({"kind": "step", "ts": time.time(), "task": "spoof", "task_id": "t1", "step": 1, "step_time_s": 0.5,
                            "pid": 1, "uid": 0}).encode()
        forged = [(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("3i", 1, 0, 0))]
        try:
            s.sendmsg([claim], forged, 0, path)
            status["forged"] = "sent"
        except PermissionError:
            status["forged"] = "EPERM"
        s.sendto(claim, path)
        status["pid"] = os.getpid()
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        status["error"] = repr(e)
    os.write(w, json.dumps(status).encode())
    os._exit(0)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to switch the child to uid nobody")
def test_spoofed_identity_gets_the_real_credentials():
    d = tempfile.mkdtemp(prefix="gw-sdk-", dir="/tmp")
    os.chmod(d, 0o755)
    path = os.path.join(d, "agent.sock")
    receiver = TaskReceiver(path, "node-a")
    os.chmod(path, 0o777)  # any local user may report metrics; who they are is the kernel's word
    try:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            child_sends(path, w)
        os.close(w)
        os.waitpid(pid, 0)
        status = json.loads(os.read(r, 4096))
        os.close(r)
        assert "error" not in status, status
        assert status["forged"] == "EPERM", "the kernel must refuse credentials that are not the sender's"
        metrics = receiver.drain()
    finally:
        receiver.close()
        shutil.rmtree(d, ignore_errors=True)
    assert len(metrics) == 1
    m = metrics[0]
    assert (m.pid, m.uid) == (status["pid"], NOBODY), "stamped from SCM_CREDENTIALS, not from the payload"
    assert m.task == "spoof"
