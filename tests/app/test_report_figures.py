"""Report figures: CSV and table rounded for reading, JSON at full precision (issue #22: CSV had
``95.99999999989701``), through ``gpuwarden report usage`` on a simulated run's spool; its
serving services' error budgets from ``engine.slo``."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

from gpuwarden.history.tables import rounded

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")


def test_rounded_keeps_four_significant_digits_and_every_whole_digit() -> None:
    assert rounded(95.99999999989701) == 96.0
    assert rounded(0.012345678) == 0.01235
    assert rounded(123456.789) == 123457.0
    assert rounded(0.0) == 0.0 and rounded(-2.000000001) == -2.0


def _report(config: Path, fmt: str) -> str:
    r = subprocess.run([str(GPUWARDEN), "report", "usage", "--since", "1d", "--format", fmt, "--config", str(config)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_csv_and_table_are_rounded_json_is_not(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"spool: {{path: {tmp_path / 's.db'}}}\nengine: {{slo: {{chat: {{error_rate: 1%}}}}}}\n")
    r = subprocess.run([str(GPUWARDEN), "run", "--config", str(config), "--simulate", "mixed", "--nodes", "1",
                        "--gpus", "4", "--duration", "1h", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO(_report(config, "csv"))))
    figures = [v for row in rows for k, v in row.items() if k != "user" and re.fullmatch(r"-?\d+\.\d+", v or "")]
    assert figures
    assert all(rounded(float(v)) == float(v) for v in figures), figures
    data = json.loads(_report(config, "json"))
    full = [v for row in data["rows"] for v in row.values() if isinstance(v, float)]
    assert any(rounded(v) != v for v in full), full  # JSON was not rounded
    (budget,) = data["budgets"]  # mixed serves chat (serving-healthy) on the node
    assert (budget["service"], budget["objective"], budget["partial"]) == ("chat", "error_rate", True)
    assert budget["events"] > 0 and budget["coverage"].endswith("seen of a 30 d window")
    assert not re.search(r"\d\.\d{3,}", _report(config, "table"))
