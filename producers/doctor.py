"""``gpuwarden doctor``: is this node ready for the agent? Each check says how to fix it."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any

from gpuwarden.producers.config import AgentSettings


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    warn: bool = False  # said, but the node is still ready (exit 0)


def check_nvml(nvml_loader=None) -> list[Check]:
    from gpuwarden.producers.nvml import load_nvml

    try:
        nv = (nvml_loader or load_nvml)()
    except Exception as e:  # noqa: BLE001 - any failure here is the finding
        return [Check("nvml", False, f"{type(e).__name__}: {e}",
                      "install the NVIDIA driver (libnvidia-ml.so.1) or run the agent with --simulate")]
    out = []
    driver = nv.nvmlSystemGetDriverVersion()
    count = nv.nvmlDeviceGetCount()
    out.append(Check("nvml", True, f"{count} GPU(s)"))
    out.append(Check("driver", True, f"driver {_text(driver)}"))
    off = []
    for i in range(count):
        try:
            if not nv.nvmlDeviceGetPersistenceMode(nv.nvmlDeviceGetHandleByIndex(i)):
                off.append(i)
        except nv.NVMLError:
            pass
    out.append(Check("persistence mode", not off,
                     "on for every GPU" if not off else f"off on GPU(s) {off}",
                     "" if not off else "nvidia-smi -pm 1 (or enable nvidia-persistenced): "
                                        "without it every NVML open pays GPU init"))
    return out


def check_kmsg(path: str) -> Check:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.close(fd)
        return Check("kernel log", True, f"{path} readable")
    except OSError as e:
        return Check("kernel log", False, f"{path}: {e.strerror}",
                     "run the agent as root or with CAP_SYSLOG (XIDs then come from NVML events only)")


def check_socket(path: str) -> Check:
    d = os.path.dirname(path) or "."
    if os.path.exists(path):
        return Check("task SDK socket", True, f"{path} exists (agent running?)")
    if os.access(d, os.W_OK):
        return Check("task SDK socket", True, f"{d} writable; the agent will create {path}")
    return Check("task SDK socket", False, f"cannot create {path} ({d} not writable)",
                 f"mkdir -p {d} and give the agent's user write access, or set agent.socket_path")


def check_kafka(bootstrap: str, timeout: float = 3.0) -> Check:
    first = bootstrap.split(",")[0].strip()
    host, _, port = first.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        return Check("kafka", False, f"{first}: {getattr(e, 'strerror', None) or e}",
                     "start Kafka or fix kafka.bootstrap; the agent spools meanwhile, "
                     "or use --output FILE.jsonl / gpuwarden run")
    return Check("kafka", True, f"{first} reachable")


def run_checks(settings: AgentSettings) -> list[Check]:
    cfg = settings.agent
    return [*check_nvml(), check_kmsg(str(cfg.kmsg_path)), check_socket(str(cfg.socket_path)),
            check_kafka(settings.kafka.bootstrap)]


def report(checks: list[Check]) -> int:
    """Print one line per check (with its fix); exit 1 if any failed."""
    for c in checks:
        status = "ok" if c.ok else "warn" if c.warn else "FAIL"
        print(f"[{status:>4}] {c.name}: {c.detail}" + (f"\n       fix: {c.fix}" if c.fix else ""))
    return 0 if all(c.ok or c.warn for c in checks) else 1


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)



