"""Measure the default rule pack on the simulator scenarios: the table in docs/rules.md.

For each (scenario, rule) case of tests/streams/scenario_table.py it runs the same
code as ``gpuwarden run --simulate SCENARIO --duration SPAN --json`` (cases with the same
run share it) and reports the
detection delay from the fault's onset and the false alerts (attention/critical
firings of rules not expected on that scenario). Then a week of ``healthy`` on
2 nodes x 8 GPUs.

    .venv/bin/python bench/rules_table.py > /tmp/table.md
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuwarden.app.cli import main  # noqa: E402
from tests.streams.scenario_table import CASES, START, case_run, expected_rules, onset_ts  # noqa: E402


def run(args: list[str], engine: dict) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "gw.yaml"
        cfg.write_text(f"spool:\n  path: {d}/spool.db\nengine:\n"
                       + "".join(f"  {k}: {v}\n" for k, v in engine.items()))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            assert main(["run", "--config", str(cfg), *args, "--json"]) == 0
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def main_() -> None:
    expected = expected_rules()
    runs: dict[tuple, list[dict]] = {}
    print("| scenario | rule | tier | detection delay (measured) | documented max | false alerts |")
    print("|---|---|---|---|---|---|")
    for case in CASES:
        scenario, rule, tier, delay, _, extra, _ = case
        key, argv, config = case_run(case)
        if key not in runs:
            runs[key] = run(argv, config)
        out = runs[key]
        hit = next((t for t in out if t["rule"] == rule and t["state"] == "firing"), None)
        got = "not fired" if hit is None else f"{hit['ts'] - onset_ts(extra):.0f} s ({hit['tier']})"
        false = sorted({t["rule"] for t in out if t["state"] == "firing" and t["tier"] != "info"
                        and t["rule"] not in expected[scenario]})
        print(f"| {scenario} {' '.join(extra)} | {rule} | {tier} | {got} | {delay:.0f} s | "
              f"{len(false)} {', '.join(false)} |")
    out = run(["--simulate", "healthy", "--nodes", "2", "--gpus", "8", "--duration", "7d",
               "--start", str(START)],
              {"observation_period": "1d", "bucket": "60s", "eval_interval": "120s"})
    loud = [t for t in out if t["state"] == "firing" and t["tier"] != "info"]
    info = [t for t in out if t["state"] == "firing" and t["tier"] == "info"]
    print(f"| healthy, 7 d, 2 nodes x 8 GPUs | (all) | - | - | - | {len(loud)} attention/critical, "
          f"{len(info)} info |")


if __name__ == "__main__":
    main_()
