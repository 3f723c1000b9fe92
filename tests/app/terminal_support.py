"""A command in a detached tmux session of a given size, and its last live-view frame read back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@cache
def _binary() -> str:
    """tmux, installed by scripts/tmux-local when missing (as root); the test fails if it cannot be."""
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "tmux-local"), "path"], capture_output=True,
                       text=True, timeout=900)
    if r.returncode != 0:
        pytest.fail(f"no tmux: {r.stderr.strip()}", pytrace=False)
    return r.stdout.strip().splitlines()[-1]


def _tmux(socket: str, *args: str) -> str:
    """tmux on a server of our own (``-L``): another tmux server's sessions and options stay out of it."""
    return subprocess.run([_binary(), "-L", socket, "-f", "/dev/null", *args], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def last_frame(cmd: str, width: int, height: int, cwd: Path, timeout_s: float = 900) -> list[str]:
    """The lines of the last frame ``cmd`` drew (:func:`screen`)."""
    return screen(cmd, width, height, cwd, timeout_s)[0]


def screen(cmd: str, width: int, height: int, cwd: Path, timeout_s: float = 900) -> tuple[list[str], list[str]]:
    """Run ``cmd`` (a shell line) in a ``width``×``height`` pseudo-terminal until it exits; (the lines
    of the last frame it drew: from its last "event time" line, one short of the terminal, the
    lines printed after it). ``timeout_s`` only catches a hang (#33: the 90 s it was failed on a busy box)."""
    socket = f"gw-test-{os.getpid()}-{time.monotonic_ns()}"
    _tmux(socket, "new-session", "-d", "-s", "run", "-x", str(width), "-y", str(height), "-c", str(cwd),
          f"unset LINES COLUMNS; {cmd}; echo RUN-ENDED; sleep 60")  # tmux may set them for a client without a tty
    try:
        deadline = time.monotonic() + timeout_s
        while "RUN-ENDED" not in (shown := _tmux(socket, "capture-pane", "-p", "-S", "-", "-t", "run")):
            assert time.monotonic() < deadline, shown
            time.sleep(0.3)
    finally:
        subprocess.run([_binary(), "-L", socket, "kill-server"], capture_output=True, timeout=30)
    lines = shown.splitlines()
    lines = lines[: next(i for i, line in enumerate(lines) if "RUN-ENDED" in line)]
    start = max(i for i, line in enumerate(lines) if line.startswith("event time "))
    return lines[start:start + height - 1], lines[start + height - 1:]


def pane(lines: list[str], title: str) -> str:
    """The text inside the box titled ``title``, its lines joined by spaces."""
    top = next(i for i, line in enumerate(lines) if f"─ {title} " in line)
    left = lines[top].rindex("╭", 0, lines[top].index(title))
    right = lines[top].index("╮", left)
    body = []
    for line in lines[top + 1:]:
        if line[left] == "╰":
            break
        body.append(line[left + 1:right].strip())
    return " ".join(b for b in body if b)
