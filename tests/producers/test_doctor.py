"""``gpuwarden doctor`` checks, each with a fix, against a fake NVML and real sockets."""

from __future__ import annotations

import socket

from gpuwarden.producers.doctor import check_kafka, check_kmsg, check_nvml, check_socket
from tests.fakes.nvml import FakeGpu, FakeNvml


def test_nvml_present_reports_driver_and_persistence():
    checks = check_nvml(lambda: FakeNvml([FakeGpu(0), FakeGpu(1)]))
    assert [c.name for c in checks] == ["nvml", "driver", "persistence mode"]
    assert all(c.ok for c in checks) and "580.159.04" in checks[1].detail


def test_nvml_missing_says_how_to_fix():
    def broken():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")
    (c,) = check_nvml(broken)
    assert not c.ok and "libnvidia-ml" in c.detail and "--simulate" in c.fix


def test_kmsg_socket_and_kafka(tmp_path):
    assert not check_kmsg(str(tmp_path / "nope")).ok
    (tmp_path / "kmsg").write_text("")
    assert check_kmsg(str(tmp_path / "kmsg")).ok
    assert check_socket(str(tmp_path / "agent.sock")).ok
    assert not check_socket("/proc/gpuwarden/agent.sock").ok
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    assert check_kafka(f"127.0.0.1:{port}").ok
    srv.close()
    down = check_kafka(f"127.0.0.1:{port}")
    assert not down.ok and "spools" in down.fix
