"""What the terminal live view costs ``gpuwarden run`` (#33, point 6: it was ~40 % of the demo's CPU).

In process (precise): the ``mixed`` simulation (2 nodes of 8 GPUs, ``--duration``) through an engine,
a frame rendered into a terminal-sized console whenever ``gpuwarden run`` would draw one on CPU
time alone (every ``VIEW_CPU_EVERY_S`` of the run's CPU; its wall-time limit of one a second
only draws fewer); the view's CPU against the engine's. The run also writes its spool, so
its share of a real run is lower still.

Then as processes (noisier on a busy machine): the same simulated run (``mixed``, 2 nodes of 8 GPUs, ``--duration``) twice, alternating, in the
same session: once in a pseudo-terminal of ``--size`` (the live view draws a frame every second of
wall time) and once with ``--json`` (no view: the reference). CPU seconds of each child
(``getrusage(RUSAGE_CHILDREN)``); the view's share is (terminal - json) / terminal.

    .venv/bin/python bench/live_view_cost.py --duration 6h --size 200x50 --rounds 2 --before 77d5051
"""

from __future__ import annotations

import argparse
import fcntl
import os
import pty
import resource
import struct
import subprocess
import sys
import tempfile
import termios
import time
from statistics import median
from pathlib import Path

GPUWARDEN = str(Path(sys.executable).with_name("gpuwarden"))


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(duration: str, size: tuple[int, int] | None, workdir: Path) -> float:
    """CPU seconds of one ``gpuwarden run`` (in a terminal of ``size``, or ``--json`` when None)."""
    config = workdir / "c.yaml"
    spool = workdir / "s.db"
    spool.unlink(missing_ok=True)
    config.write_text(f"spool: {{path: {spool}}}\n")
    cmd = [GPUWARDEN, "run", "--config", str(config), "--simulate", "mixed", "--nodes", "2", "--gpus", "8",
           "--duration", duration]
    before = _cpu()
    if size is None:
        subprocess.run([*cmd, "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        return _cpu() - before
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[1], size[0], 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"TERM": "xterm-256color"}
    proc = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=subprocess.DEVNULL, env=env)
    os.close(slave)
    while True:  # drain the terminal until the run closes it
        try:
            if not os.read(master, 65536):
                break
        except OSError:
            break
    os.close(master)
    assert proc.wait() == 0
    return _cpu() - before


def in_process(duration: str, width: int, height: int) -> tuple[float, float, int]:
    """(engine CPU-s, view CPU-s, frames) of one simulated run drawn at ``gpuwarden run``'s cadence."""
    import io

    from rich.console import Console
    from rich.live import Live

    from gpuwarden.app.live_view import Status, render
    from gpuwarden.app.standalone import VIEW_CPU_EVERY_S, with_simulated_services
    from gpuwarden.producers.simulator import Simulator, tick_for
    from gpuwarden.streams.config import EngineConfig
    from gpuwarden.streams.engine import Engine
    from gpuwarden.streams.rules import load_rules
    from gpuwarden.units import parse_duration

    span = parse_duration(duration)
    start = 1_790_000_000.0
    sim = Simulator("mixed", nodes=2, gpus=8, seed=0, start_ts=start, tick_s=tick_for(span))
    engine = Engine(load_rules(), with_simulated_services(EngineConfig()))
    console = Console(file=io.StringIO(), width=width, height=height, force_terminal=True, color_system="truecolor")
    status = Status(started=start, duration=span)
    engine_s = view_s = 0.0
    frames = 0
    with Live(console=console, auto_refresh=False, vertical_overflow="crop") as live:
        since = 0.0
        while sim.ts < start + span:
            t0 = time.process_time()
            engine.process_many(sim.step())
            t1 = time.process_time()
            engine_s += t1 - t0
            since += t1 - t0
            if since >= VIEW_CPU_EVERY_S:
                since = 0.0
                live.update(render(engine, sim.ts, status), refresh=True)
                console.file = io.StringIO()  # what a terminal would have shown: dropped
                view_s += time.process_time() - t1
                frames += 1
    return engine, sim.ts, engine_s, view_s, frames


def frame_cost(render_fn, engine, now: float, width: int, height: int, n: int = 10) -> float:
    """CPU seconds of one frame of ``render_fn`` (median of ``n``) into a terminal-sized console."""
    import io

    from rich.console import Console

    from gpuwarden.app.live_view import Status

    costs = []
    for _ in range(n):
        console = Console(file=io.StringIO(), width=width, height=height, force_terminal=True)
        t0 = time.process_time()
        console.print(render_fn(engine, now, Status(started=now - 3600, duration=3600)))
        costs.append(time.process_time() - t0)
    return median(costs)


def renderer_at(rev: str, tmp: Path):
    """``render`` of app/live_view.py as it was at git revision ``rev`` (with that revision's
    scheduler_view), loaded beside the current code."""
    import importlib.util

    repo = Path(__file__).resolve().parents[1]
    for name in ("live_view", "scheduler_view"):
        text = subprocess.run(["git", "-C", str(repo), "show", f"{rev}:app/{name}.py"], capture_output=True,
                              text=True, check=True).stdout
        (tmp / f"old_{name}.py").write_text(text.replace("from gpuwarden.app.scheduler_view import",
                                                         "from old_scheduler_view import"))
    sys.path.insert(0, str(tmp))
    spec = importlib.util.spec_from_file_location("old_live_view", tmp / "old_live_view.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_live_view"] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module.render


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", default="2h")
    ap.add_argument("--size", default="200x50")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--before", metavar="REV", help="also time a frame drawn by app/live_view.py of this git revision")
    a = ap.parse_args()
    w, h = (int(x) for x in a.size.split("x"))
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    engine, now, engine_s, view_s, frames = in_process(a.duration, w, h)
    print(f"in process, {a.duration} of mixed 2x8: engine {engine_s:.1f} CPU-s, view {view_s:.2f} CPU-s in {frames} "
          f"frames of {a.size} ({view_s / frames * 1000:.1f} ms each): the view {view_s / (engine_s + view_s):.1%} "
          "of the two")
    if a.before:
        from gpuwarden.app.live_view import render

        with tempfile.TemporaryDirectory() as d:
            before = frame_cost(renderer_at(a.before, Path(d)), engine, now, w, h)
        after = frame_cost(render, engine, now, w, h)
        print(f"one frame of the run's end state at {a.size}: {after * 1000:.1f} ms of CPU, {before * 1000:.1f} ms "
              f"with app/live_view.py of {a.before} ({before / after:.1f}x); medians of 10")
    tty, plain = [], []
    with tempfile.TemporaryDirectory() as d:
        for k in range(a.rounds):
            tty.append(run(a.duration, (w, h), Path(d)))
            plain.append(run(a.duration, None, Path(d)))
            print(f"round {k + 1}: terminal {a.size} {tty[-1]:.1f} CPU-s, --json {plain[-1]:.1f} CPU-s")
    if not tty:
        return
    t, j = median(tty), median(plain)
    print(f"median: terminal {t:.1f} CPU-s, --json {j:.1f} CPU-s; the live view's share {(t - j) / t:.1%} "
          f"of the run's CPU")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
