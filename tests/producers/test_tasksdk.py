"""Task SDK against the agent's receiver over a real Unix datagram socket."""

from __future__ import annotations

import os
import time

import pytest

from gpuwarden.contract import ContractError
from gpuwarden.producers.attrib import Attribution
from gpuwarden.producers.taskrecv import TaskReceiver
from gpuwarden.sdk import Task


@pytest.fixture
def receiver(tmp_path):
    r = TaskReceiver(str(tmp_path / "agent.sock"), "node-00",
                     attributor=lambda pid: Attribution(task="from-proc", task_id=f"pid-{pid}"))
    yield r
    r.close()


def drain(r, n, timeout=120.0):
    """Until ``n`` records arrived; ``timeout`` only catches a hang (#33: 2 s failed on a busy box)."""
    got, end = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < end:
        got += r.drain()
        time.sleep(0.01)
    return got


def test_calls_arrive_with_kernel_credentials(receiver):
    t = Task("llama-pretrain", "slurm-9", socket_path=receiver.path)
    with t.step() as s:
        with s.data():
            time.sleep(0.01)
    with t.checkpoint():
        pass
    t.throughput(1234.5, "tokens/s")
    t.ttft(0.2)
    t.latency(1.5)
    t.oom("CUDA out of memory")
    t.exit(1, "crashed")
    got = drain(receiver, 8)
    assert [m.kind for m in got] == ["step", "checkpoint_begin", "checkpoint_end", "throughput",
                                     "ttft", "latency", "oom", "exit"]
    assert all(m.pid == os.getpid() and m.uid == os.getuid() and m.task == "llama-pretrain" for m in got)
    step = got[0]
    assert step.step == 1 and step.data_wait_s >= 0.01 and step.step_time_s >= step.data_wait_s


def test_claimed_pid_is_ignored_and_label_comes_from_attribution(receiver):
    import socket as s
    sock = s.socket(s.AF_UNIX, s.SOCK_DGRAM)
    sock.sendto(b'{"kind":"step","ts":1700000000,"step_time_s":1.0,"pid":1,"uid":0}', receiver.path)
    (m,) = drain(receiver, 1)
    assert m.pid == os.getpid() and m.uid == os.getuid()
    assert m.task == "from-proc" and m.task_id == f"pid-{os.getpid()}"


def test_bad_datagrams_are_counted_not_fatal(receiver):
    import socket as s
    sock = s.socket(s.AF_UNIX, s.SOCK_DGRAM)
    for bad in (b"not json", b"[1]", b'{"kind":"nope","ts":1}', b'{"kind":"step","ts":-5}'):
        sock.sendto(bad, receiver.path)
    Task("a", "b", socket_path=receiver.path).report_step(0.5)
    got = drain(receiver, 1)
    assert [m.kind for m in got] == ["step"] and receiver.rejected == 4
    with pytest.raises(ContractError, match="kind"):
        receiver.parse(b'{"kind":"nope","ts":1}', 1, 1)


def test_no_agent_never_raises_or_blocks(tmp_path):
    t = Task("x", "y", socket_path=str(tmp_path / "absent.sock"))
    t.report_step(0.1)
    assert t._quiet_until > time.time()  # noticed the absent agent: quiet for a while
    for _ in range(100):
        t.report_step(0.1)
        with t.step():
            pass


def test_receiver_thread_collects_between_drains(tmp_path):
    r = TaskReceiver(str(tmp_path / "a.sock"), "n")
    r.start()
    try:
        t = Task("a", "b", socket_path=r.path)
        for i in range(30):  # more than the kernel's default queue of 10 datagrams
            t.report_step(0.1)
            time.sleep(0.002)
        got = drain(r, 30)
    finally:
        r.close()
    assert [m.step for m in got] == list(range(1, 31))


def test_the_model_says_whether_it_is_trained_or_served(receiver):
    t = Task("chat", "svc-1", socket_path=receiver.path)
    t.model(13e9, layers=40, hidden=5120, seq_len=4096, mode="serve")
    t.model(7e9)  # as before the mode argument: nothing said, the report decides
    served, plain = drain(receiver, 2)
    assert (served.kind, served.model_mode, served.model_params, served.model_seq_len) == ("model", "serve", 13e9, 4096)
    assert plain.model_mode is None and plain.model_params == 7e9
