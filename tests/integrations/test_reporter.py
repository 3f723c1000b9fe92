"""What both framework callbacks send (gpuwarden/integrations/reporter.py), without a framework:
through the real SDK to the agent's receiver, on a clock the test moves."""

from __future__ import annotations

import pytest

from gpuwarden.integrations import reporter as reporter_module
from gpuwarden.integrations.reporter import INTERRUPTED, Reporter
from gpuwarden.producers.taskrecv import TaskReceiver
from gpuwarden.sdk import Task


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(reporter_module.time, "perf_counter", c)
    return c


@pytest.fixture
def receiver(tmp_path):
    r = TaskReceiver(str(tmp_path / "agent.sock"), "node-1")
    yield r
    r.close()


def summary(got: list, kinds: tuple[str, ...] = ("throughput", "oom", "exit", "model")) -> list[tuple]:
    return [(m.kind.value, m.throughput, m.throughput_unit, m.exit_code) for m in got if m.kind.value in kinds]


def sent(receiver: TaskReceiver) -> list[tuple]:
    return summary(receiver.drain())


def make(receiver: TaskReceiver, main: bool = True, every_s: float = 10.0) -> Reporter:
    return Reporter(Task("t", "t-1", socket_path=receiver.path), throughput_every_s=every_s, main=main)


def test_throughput_is_the_work_over_the_wall_time_between_reports(receiver, clock):
    r = make(receiver)
    clock.now += 4  # 4 s of wall time, validation and checkpoints included, for two steps
    r.step(1, 1.0, 0.1, samples=32, tokens=None)
    r.step(2, 1.0, 0.1, samples=32, tokens=None)
    assert sent(receiver) == []  # 10 s between reports
    clock.now += 6
    r.step(3, 1.0, 0.1, samples=32, tokens=None)
    clock.now += 2
    r.step(4, 1.0, 0.1, samples=16, tokens=4096)  # tokens known: tokens/s from here on
    r.finished()
    assert sent(receiver) == [("throughput", 9.6, "samples/s", None), ("throughput", 2048.0, "tokens/s", None),
                              ("exit", None, None, 0)]


def test_only_the_main_process_speaks_for_the_job(receiver, clock):
    r = make(receiver, main=False, every_s=0)
    r.model(1000, layers=2, hidden=32, seq_len=16)
    clock.now += 1
    r.step(1, 1.0, 0.1, samples=8, tokens=128)
    r.finished()
    got = receiver.drain()
    assert [m.kind.value for m in got] == ["step", "exit"]


def test_the_model_is_said_once(receiver, clock):
    r = make(receiver)
    r.model(1000, layers=2, hidden=32, seq_len=16)
    r.model(1000, layers=2, hidden=32, seq_len=16)
    assert sent(receiver) == [("model", None, None, None)]


class OutOfMemoryError(RuntimeError):
    """torch.OutOfMemoryError's name, without torch."""


@pytest.mark.parametrize(("exc", "expected"), [
    (RuntimeError("boom"), [("exit", None, None, 1)]),
    (OutOfMemoryError("CUDA out of memory"), [("oom", None, None, None), ("exit", None, None, 1)]),
    (KeyboardInterrupt(), [("exit", None, None, INTERRUPTED)]),
], ids=["exception", "oom", "interrupt"])
def test_an_exception_closes_the_checkpoint_and_is_the_exit(receiver, clock, exc, expected):
    r = make(receiver)
    r.checkpoint_begin()
    r.failed(exc)
    got = receiver.drain()
    assert [m.kind.value for m in got][:2] == ["checkpoint_begin", "checkpoint_end"]
    assert summary(got, ("oom", "exit")) == expected
    assert got[-1].message == f"{type(exc).__name__}: {exc}"

