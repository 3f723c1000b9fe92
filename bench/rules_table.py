"""Measure the default rule pack on the simulator scenarios: the table in docs/rules.md.

For each (scenario, rule) case of tests/streams/scenario_table.py it runs the same
code as ``gpuwarden run --simulate SCENARIO --duration SPAN --json`` (cases with the same
run share it) and reports the
detection delay from the fault's onset and the false alerts (attention/critical
firings of rules not expected on that scenario), and what the rule gave on the real H200
recordings (tests/streams/real_recordings.py: time-dilated to fill the windows; clock-capped
also with its clock share lowered to 0.5 %) and its delay from the recorded load's onset there and
on two jobs made of them (``real_delays``); for job-straggler, on the agent's load as a 4-node
job with one node slowed from an onset (``straggler_recorded``). Then the quiet cases
(job-straggler on multi-node jobs that checkpoint and evaluate, or run pipeline stages that
differ), a week of ``healthy`` on 2 nodes x 8 GPUs and 15 days of it on 4 nodes (the
multi-node job on 4 nodes: job-straggler's false alarms).

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
from tests.streams.real_recordings import (  # noqa: E402
    AGENT, BRAKE, HEAVY_FROM_S, PROBE, PROBE_CHECKPOINTS, PROBE_ONSET_S, REAL_RECORDINGS, SILENT, as_task, dilate,
    firing, job_run, power_heavy, records,
)
from tests.streams.real_recordings import run as run_recording  # noqa: E402

#: Where the recorded load begins in the agent's recording (its process appears at 6 s; README).
AGENT_ONSET_S = 6.0


def real_runs() -> dict[str, tuple[list, float]]:
    """The real recordings and the two jobs made of them, dilated: name -> (records, onset ts)."""
    agent, probe = records(AGENT), records(PROBE)
    a0, p0 = min(r.ts for r in agent), min(r.ts for r in probe)
    return {
        "h200-agent ×20": (dilate(agent, 20), a0 + 20 * AGENT_ONSET_S),
        "h200-leak-probe ×60": (dilate(probe, 60), p0 + 60 * PROBE_ONSET_S),
        "leak probe as a job at 0-7 % with 3 SDK checkpoints ×20":
            (dilate(as_task(probe, checkpoints=PROBE_CHECKPOINTS), 20), p0 + 20 * PROBE_ONSET_S),
        "h200-agent made power-heavy ×60 (built)": (dilate(power_heavy(agent), 60), a0 + 60 * HEAVY_FROM_S),
    }


def real_delays() -> dict[str, str]:
    """Per rule, its delay from the recorded load's onset on each run of ``real_runs`` (or "quiet")."""
    got: dict[str, dict[str, float]] = {}
    for name, (recs, onset) in real_runs().items():
        for t in run_recording(recs):
            if t.state == "firing":
                got.setdefault(t.rule, {}).setdefault(name, t.ts - onset)
    runs = list(real_runs())
    return {rule: "; ".join(f"{n}: {got[rule][n]:.0f} s" if n in got[rule] else f"{n}: quiet" for n in runs)
            if rule in got else f"quiet on all {len(runs)}" for rule in {c[1] for c in CASES} | set(got)}


def straggler_recorded() -> str:
    """job-straggler on the agent's load as a 4-node job (``job_run``): each node it named and when,
    from the slow rank's onset."""
    parts = []
    for what, slow, busy in (("node 3 at 80 % SM clock, no reason bit", SILENT, True),
                             ("node 0 under HW power brake, 50 %", BRAKE, True),
                             ("unmodified copy", None, True),
                             ("node 3 at 80 %, utilization as recorded (0-7 %)", SILENT, False)):
        run = job_run(slow, busy=busy)
        named = [f"{t.labels['node']} named at {t.ts - run.onset:.0f} s" for t in run.transitions
                 if t.rule == "job-straggler" and t.state == "firing"]
        quiet = "quiet" if any(run.judged.values()) else "quiet, no minute judged"
        parts.append(f"{what}: {', '.join(named) or quiet}")
    return "h200-agent as a 4-node job ×20 (built): " + "; ".join(parts)


from tests.streams.scenario_table import CASES, QUIET_CASES, START, case_run, expected_rules, onset_ts  # noqa: E402


def run(args: list[str], engine: dict) -> list[dict]:
    with tempfile.TemporaryDirectory() as d:
        cfg = Path(d) / "gw.yaml"
        cfg.write_text(f"spool:\n  path: {d}/spool.db\nengine:\n"
                       + "".join(f"  {k}: {v}\n" for k, v in engine.items()))
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
            assert main(["run", "--config", str(cfg), *args, "--json"]) == 0
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def real_column() -> dict[str, str]:
    """Per rule, what it gave on each real recording (dilated), as the table's last column."""
    fired: dict[str, set[str]] = {}
    low_share: dict[str, bool] = {}
    for name, (path, k, _) in sorted(REAL_RECORDINGS.items()):
        recs = dilate(records(path), k)
        fired[f"{name} ×{k:g}"] = {rule for rule, _ in firing(run_recording(recs))}
        low_share[f"{name} ×{k:g}"] = ("clock-capped", "info") in firing(run_recording(recs, share=0.005))
    out = {}
    for rule in {c[1] for c in CASES}:
        parts = []
        for where, rules in fired.items():
            said = "fired" if rule in rules else "quiet"
            if rule == "clock-capped" and rule not in rules:
                said += ", fires at a 0.5 % share" if low_share[where] else ", quiet at a 0.5 % share"
            parts.append(f"{where}: {said}")
        out[rule] = "; ".join(parts)
    return out


def main_() -> None:
    expected = expected_rules()
    real = real_column()
    runs: dict[tuple, list[dict]] = {}
    delays = real_delays()
    delays["job-straggler"] += f"; {straggler_recorded()}"
    print("| scenario | rule | tier | detection delay (measured) | documented max | false alerts "
          "| real recordings (default pack; a firing there is what happened) | delay on the real recordings |")
    print("|---|---|---|---|---|---|---|---|")
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
              f"{len(false)} {', '.join(false)} | {real[rule]} | {delays[rule]} |")
    out = run(["--simulate", "healthy", "--nodes", "2", "--gpus", "8", "--duration", "7d",
               "--start", str(START)],
              {"observation_period": "1d", "bucket": "60s", "eval_interval": "120s"})
    loud = [t for t in out if t["state"] == "firing" and t["tier"] != "info"]
    info = [t for t in out if t["state"] == "firing" and t["tier"] == "info"]
    print(f"| healthy, 7 d, 2 nodes x 8 GPUs | (all) | - | - | - | {len(loud)} attention/critical, "
          f"{len(info)} info | |")
    for scenario, rule, span, extra in QUIET_CASES:
        out = run(["--simulate", scenario, "--duration", span, "--start", str(START), *extra], {"observation_period": "1d"})
        said = sum(t["rule"] == rule and t["state"] == "firing" for t in out)
        print(f"| {scenario} {' '.join(extra)}, {span} | {rule} | - | (must stay quiet) | - | {said} {rule} | |")
    out = run(["--simulate", "healthy", "--nodes", "4", "--gpus", "2", "--duration", "15d", "--start", str(START)],
              {"observation_period": "1d"})
    said = sum(t["rule"] == "job-straggler" and t["state"] == "firing" for t in out)
    loud = [t for t in out if t["state"] == "firing" and t["tier"] != "info"]
    print(f"| healthy, 15 d, 4 nodes x 2 GPUs (the multi-node job on all 4) | job-straggler | - | - | - | "
          f"{said} job-straggler, {len(loud)} attention/critical in all | |")


if __name__ == "__main__":
    main_()
