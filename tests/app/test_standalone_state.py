"""`gpuwarden run` keeps engine state in the spool: a later run continues, an earlier one starts fresh."""

from __future__ import annotations

import subprocess
import sys

T0 = 1_790_000_000


def run(tmp_path, start: int, span: str = "1h") -> subprocess.CompletedProcess[str]:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\n")
    return subprocess.run(
        [sys.executable, "-m", "gpuwarden.app.cli", "run", "--config", str(cfg), "--simulate", "memory-leak",
         "--gpus", "2", "--seed", "3", "--start", str(start), "--duration", span, "--json"],
        capture_output=True, text=True, timeout=120)


def test_later_run_continues_and_earlier_run_starts_fresh(tmp_path):
    first = run(tmp_path, T0)
    assert first.returncode == 0, first.stderr
    assert "fresh state" not in first.stderr
    fired = [line for line in first.stdout.splitlines() if '"rule":"memory-leak"' in line]
    assert fired, "the leak fires in the first hour"

    later = run(tmp_path, T0 + 3600)                     # continues where the first stopped
    assert later.returncode == 0 and "fresh state" not in later.stderr
    assert "0 late" in later.stderr

    again = run(tmp_path, T0)                            # would be all late: starts fresh instead
    assert again.returncode == 0
    assert "starting with fresh state" in again.stderr and "0 late" in again.stderr
    assert again.stdout == first.stdout                  # the same run from scratch, the same alerts
