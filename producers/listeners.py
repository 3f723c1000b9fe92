"""Which process listens on which TCP port, and who its children are, from ``/proc``.

The inference scraper uses it both ways: a configured target's port → its serving process
(so the record names the pid and the GPUs that process and its children hold: vLLM's API
server holds no GPU itself, its engine-core and worker children do), and the processes
holding GPUs → their ancestors' listening ports (discovery: a ``/metrics`` there is probed).
Sockets are read from ``<proc_root>/net/tcp`` and ``tcp6``: the agent's network namespace,
the one whose ``127.0.0.1`` it can reach. Unreadable entries are skipped, never raised.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

_LISTEN = "0A"


def listening_ports(proc_root: Path) -> dict[int, int]:
    """Socket inode → port, for TCP sockets in LISTEN state."""
    out: dict[int, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_root / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN:
                out[int(f[9])] = int(f[1].rsplit(":", 1)[1], 16)
    return out


def socket_owners(proc_root: Path, inodes: Iterable[int], pids: Iterable[int]) -> dict[int, int]:
    """Socket inode → the pid holding it (the first found) among ``pids``, for ``inodes``."""
    want = {f"socket:[{i}]": i for i in inodes}
    out: dict[int, int] = {}
    if not want:
        return out
    for entry in pids:
        try:
            fds = os.listdir(proc_root / str(entry) / "fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(proc_root / str(entry) / "fd" / fd)
            except OSError:
                continue
            if link in want:
                out.setdefault(want[link], entry)
    return out


def parents(proc_root: Path) -> dict[int, int]:
    """pid → parent pid, from ``/proc/<pid>/stat``."""
    out: dict[int, int] = {}
    for pid in _pids(proc_root):
        try:
            stat = (proc_root / str(pid) / "stat").read_text()
        except OSError:
            continue
        out[pid] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def family(pid: int, parent_of: dict[int, int]) -> set[int]:
    """``pid`` and all its descendants."""
    out, frontier = {pid}, {pid}
    while frontier:
        frontier = {c for c, p in parent_of.items() if p in frontier and c not in out}
        out |= frontier
    return out


def ancestors(pid: int, parent_of: dict[int, int]) -> list[int]:
    """``pid`` and its ancestors up to (not including) pid 1."""
    out = []
    while pid > 1 and pid not in out:
        out.append(pid)
        pid = parent_of.get(pid, 0)
    return out


def port_owners(proc_root: Path, pids: Iterable[int]) -> dict[int, int]:
    """Listening port → the pid among ``pids`` holding its socket."""
    ports = listening_ports(proc_root)
    return {ports[inode]: pid for inode, pid in socket_owners(proc_root, ports, pids).items()}


def _pids(proc_root: Path) -> list[int]:
    try:
        return [int(e) for e in os.listdir(proc_root) if e.isdigit()]
    except OSError:
        return []
