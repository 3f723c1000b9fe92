"""``gpuwarden agent`` end to end: simulated span to a JSONL file; clear failure without NVML."""

from __future__ import annotations

import subprocess
import sys

from gpuwarden.contract import decode, unbatch
from tests.producers.test_simulator import T0, check_mixed


def run_agent(*argv: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "agent", *argv],
                          capture_output=True, text=True, timeout=120, cwd=cwd)


def test_simulated_mixed_to_jsonl_covers_every_scenario(tmp_path):
    out = tmp_path / "f.jsonl"
    proc = run_agent("--simulate", "mixed", "--nodes", "2", "--gpus", "8", "--duration", "10m",
                     "--start", str(T0), "--output", str(out))
    assert proc.returncode == 0, proc.stderr
    records = list(unbatch(decode(line) for line in out.read_text().splitlines()))
    assert min(r.ts for r in records) == T0 and max(r.ts for r in records) < T0 + 600
    check_mixed(records)


def test_default_start_is_duration_before_now(tmp_path):
    import time
    out = tmp_path / "f.jsonl"
    before = time.time()
    assert run_agent("--simulate", "healthy", "--gpus", "2", "--duration", "1m", "--output", str(out)).returncode == 0
    first = decode(out.read_text().splitlines()[0])
    assert before - 61 <= first.ts <= time.time() - 59


def test_unknown_scenario_and_bad_start_are_usage_errors(tmp_path):
    p = run_agent("--simulate", "nope", "--duration", "1m", "--output", str(tmp_path / "x"))
    assert p.returncode == 2 and "unknown scenario 'nope'" in p.stderr
    p = run_agent("--simulate", "healthy", "--duration", "1m", "--start", "yesterday-ish",
                  "--output", str(tmp_path / "x"))
    assert p.returncode == 2 and "--start" in p.stderr


def test_without_nvml_the_agent_says_what_to_do(tmp_path):
    p = run_agent("--duration", "1s", "--output", str(tmp_path / "x.jsonl"))
    assert p.returncode == 1 and "gpuwarden doctor" in p.stderr and "Traceback" not in p.stderr


def test_live_simulation_ticks_on_wall_clock_until_sigterm(tmp_path):
    import signal
    import time
    out = tmp_path / "live.jsonl"
    began = time.time()
    p = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--simulate", "healthy",
                          "--gpus", "1", "--output", str(out)], stderr=subprocess.PIPE, text=True)

    def snapshots() -> int:
        return out.read_text().count('"node_snapshot/2"') if out.exists() else 0

    try:  # two ticks written: a wait on them, not a fixed 3.5 s (#33: the start alone can take that)
        while snapshots() < 2:
            assert p.poll() is None, p.stderr.read()
            assert time.time() - began < 300, "a hang"
            time.sleep(0.1)
    finally:
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=300)
    assert rc == 0, p.stderr.read()
    snaps = [decode(line) for line in out.read_text().splitlines() if '"node_snapshot/2"' in line]
    assert len(snaps) >= 2 and [s.seq for s in snaps] == list(range(len(snaps)))
    assert began - 1 <= snaps[0].ts <= time.time()  # live: event time is the wall clock while it ran


def test_spool_over_limit_drops_oldest_and_reports_an_agent_event(tmp_path):
    from types import SimpleNamespace

    from gpuwarden.spool import Spool
    from gpuwarden.producers.agent import _SpoolDrops

    spool = Spool(tmp_path / "s.db", max_bytes=1000, max_age_s=3600)
    for i in range(30):
        spool.append("gpu.samples", b"x" * 100, key="n", ts=time_now() - 10 + i * 0.1)
    drops = _SpoolDrops(SimpleNamespace(spool=spool), "node-00")
    (ev,) = drops.check()
    assert ev.kind == "agent" and ev.count >= 20 and "dropped" in ev.message
    assert spool.counter("dropped") == ev.count
    spool.close()


def time_now() -> float:
    import time
    return time.time()


def test_agent_output_and_run_record_tick_alike(tmp_path):
    """The same simulation from both commands is the same input (once 1 s against 5 s ticks,
    which put their transitions 2-30 s apart)."""
    out, rec = tmp_path / "agent.jsonl", tmp_path / "run.jsonl"
    args = ("--simulate", "mixed", "--nodes", "2", "--gpus", "4", "--duration", "10m", "--start", str(T0))
    assert run_agent(*args, "--output", str(out)).returncode == 0
    p = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "run", *args, "--record", str(rec)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr

    def ticks(path):
        return sorted({r.ts for r in map(decode, path.read_text().splitlines()) if r.schema_.startswith("node_")})

    assert ticks(out) == ticks(rec) and ticks(out)[1] - ticks(out)[0] == 5.0


def test_the_same_start_means_the_same_time_in_every_zone_and_command(tmp_path):
    """An ISO --start without an offset is UTC for agent and run alike (the agent once read it
    as local time: 8 h apart from run under Asia/Shanghai)."""
    import os

    start = "2026-05-01T12:00:00"
    firsts = []
    for tz in ("UTC", "Asia/Shanghai"):
        env = {**os.environ, "TZ": tz}
        out, rec = tmp_path / f"agent-{tz[:3]}.jsonl", tmp_path / f"run-{tz[:3]}.jsonl"
        args = ("--simulate", "healthy", "--gpus", "2", "--duration", "1m", "--start", start)
        for cmd, path, flag in (("agent", out, "--output"), ("run", rec, "--record")):
            p = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", cmd, *args, flag, str(path)],
                               capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
            assert p.returncode == 0, p.stderr
            firsts.append(decode(path.read_text().splitlines()[0]).ts)
    assert firsts == [1777636800.0] * 4
