"""Every default rule fires on its simulator scenario with its tier within its delay; healthy is quiet.

One case runs through the real CLI subprocess; the rest call the same `gpuwarden run`
code in-process (tests/streams/conftest.py) to save time, and cases with the same run
(scenario, span, arguments, engine config) share it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwarden.producers.simulator import SCENARIOS
from gpuwarden.streams.rules import load_rules
from tests.streams.scenario_table import CASES, CODED_RULES, QUIET_CASES, case_run, expected_rules, onset_ts

_RUNS: dict[tuple, list[dict]] = {}
_EXPECTED = expected_rules()


def _first_firing(transitions: list[dict], rule: str) -> dict | None:
    return next((t for t in transitions if t["rule"] == rule and t["state"] == "firing"), None)


@pytest.mark.parametrize("scenario,rule,tier,delay,span,args,engine", CASES,
                         ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_rule_fires_on_its_scenario(run_cli, scenario, rule, tier, delay, span, args, engine) -> None:
    key, argv, config = case_run((scenario, rule, tier, delay, span, args, engine))
    if key not in _RUNS:
        _RUNS[key] = run_cli(*argv, engine=config)
    out = _RUNS[key]
    t = _first_firing(out, rule)
    assert t is not None, f"{rule} never fired on {scenario}: {sorted({x['rule'] for x in out})}"
    assert t["tier"] == tier
    assert t["ts"] - onset_ts(args) <= delay
    assert t["evidence"]["held_for_s"] is not None and t["action"]
    loud = {x["rule"] for x in out if x["state"] == "firing" and x["tier"] != "info"}
    assert loud <= _EXPECTED[scenario], f"false alerts on {scenario}: {sorted(loud - _EXPECTED[scenario])}"


def test_every_default_rule_and_fault_scenario_has_a_case() -> None:
    assert {c[1] for c in CASES} == set(load_rules().names()) | CODED_RULES
    faults = {n for n, s in SCENARIOS.items() if s.placement not in ("none", "serving")}  # serving: own table
    cased = {c[0] for c in CASES} | {c[0] for c in QUIET_CASES}  # quiet ones: tests/streams/test_straggler.py
    assert faults <= cased, f"fault scenarios without a case: {faults - cased}"


def test_healthy_week_on_16_gpus_raises_nothing_above_info(run_cli) -> None:
    # Observation period 1 d: deviation rules are live for the last 6 days of the week.
    out = run_cli("--simulate", "healthy", "--nodes", "2", "--gpus", "8", "--duration", "7d",
                  engine={"observation_period": "1d", "bucket": "60s", "eval_interval": "120s"})
    loud = [(t["rule"], t["labels"]) for t in out if t["tier"] != "info"]
    assert loud == []


def test_live_run_and_replay_of_its_record_are_byte_identical(tmp_path: Path) -> None:
    cfg = tmp_path / "gw.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\n")
    rec = tmp_path / "in.jsonl"
    cli = [sys.executable, "-m", "gpuwarden.app.cli"]
    live = subprocess.run([*cli, "run", "--config", str(cfg), "--simulate", "ecc-dbe", "--duration", "10m",
                           "--start", "1700000000", "--json", "--record", str(rec)],
                          capture_output=True, timeout=120, check=True)
    replay = subprocess.run([*cli, "replay", "--config", str(cfg), "--from-file", str(rec), "--json"],
                            capture_output=True, timeout=120, check=True)
    lines = live.stdout.splitlines()
    assert lines and all(json.loads(x)["schema"] == "alert/1" for x in lines)  # stdout: JSON only
    assert {json.loads(x)["rule"] for x in lines} >= {"ecc-double-bit", "xid-hardware"}
    assert replay.stdout == live.stdout


def test_replay_from_unreachable_kafka_says_why(tmp_path: Path, capsys) -> None:
    from gpuwarden.app.cli import main

    assert main(["replay", "--kafka", "127.0.0.1:1", "--json"]) == 1
    assert "Kafka 127.0.0.1:1: " in capsys.readouterr().err
