"""What the scripts that run a real service for tests share (slurm-local, prometheus-local, ...).

Stdlib only: they must work before any virtualenv exists. Each script names itself in
:class:`Service` so its messages say who speaks.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


class Fail(Exception):
    """A failure reported as one message and exit code 1."""


@dataclass(frozen=True)
class Service:
    name: str  # the script's name, e.g. "slurm-local"
    dir_env: str  # the variable that moves its directory (several instances at once)

    def say(self, msg: str) -> None:
        print(f"{self.name}: {msg}", file=sys.stderr, flush=True)

    def run_dir(self, default: str) -> Path:
        env = os.environ.get(self.dir_env)
        return Path(env).resolve() if env else REPO_ROOT / ".cache" / default

    def ensure_packages(self, packages: tuple[str, ...], binaries: tuple[str, ...]) -> None:
        """Install Debian ``packages`` with apt-get (as root) when any of ``binaries`` is missing."""
        missing = [b for b in binaries if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
        if not missing:
            return
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise Fail(f"missing {', '.join(missing)}: install {' '.join(packages)} (Debian: apt-get install "
                       f"{' '.join(packages)}); this script installs them itself only as root with apt-get")
        self.say(f"installing {' '.join(packages)} with apt-get")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise Fail(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pid_alive(path: Path) -> bool:
    try:
        os.kill(int(path.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


def stop_pid(path: Path, timeout_s: float = 10.0) -> bool:
    """SIGTERM the process in pid file ``path``, SIGKILL after ``timeout_s``; True if one ran."""
    if not path.exists() or not pid_alive(path):
        return False
    pid = int(path.read_text().strip())
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True


def http_ok(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as r:
            return 200 <= r.status < 300
    except OSError:
        return False
