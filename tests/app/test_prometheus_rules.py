"""deploy/prometheus/: ``promtool check rules`` and ``promtool test rules`` (Debian's promtool,
installed by scripts/prometheus-local when missing); deploy/grafana/: dashboards Grafana can load
(what their queries return is tests/integration/test_prometheus_stack.py's)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "gpuwarden-rules.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    if shutil.which("promtool") is None:
        out = subprocess.run([sys.executable, str(ROOT / "scripts" / "prometheus-local"), "install"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr  # fails loudly, in CI and out of it
    return shutil.which("promtool") or "promtool"


@pytest.mark.prometheus
def test_promtool_check_rules_passes(promtool: str) -> None:
    out = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS: 11 rules found" in out.stdout


@pytest.mark.prometheus
def test_promtool_rule_unit_tests_pass(promtool: str) -> None:
    out = subprocess.run([promtool, "test", "rules", str(RULES.with_suffix(".test.yml"))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_shipped_alert_has_a_promtool_test_that_fires_it() -> None:
    """Each alert of gpuwarden-rules.yml is the alertname of a test case expecting it to fire
    (``exp_alerts`` not empty), so ``promtool test rules`` checks its expression and annotations."""
    import yaml

    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r}
    cases = yaml.safe_load(RULES.with_suffix(".test.yml").read_text())["tests"]
    fired = {c["alertname"] for t in cases for c in t["alert_rule_test"] if c.get("exp_alerts")}
    assert len(alerts) == 11 and alerts - fired == set(), alerts - fired


def test_dashboards_are_grafana_json_with_a_query_in_every_panel() -> None:
    dashboards = [json.loads(p.read_text()) for p in sorted((ROOT / "deploy" / "grafana").glob("*.json"))]
    assert {d["uid"] for d in dashboards} == {"gpuwarden-fleet", "gpuwarden-node", "gpuwarden-pipeline", "gpuwarden-classes",
                                              "gpuwarden-scheduler", "gpuwarden-inference"}
    for d in dashboards:
        assert d["templating"]["list"][0] == {**d["templating"]["list"][0], "type": "datasource", "query": "prometheus"}
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)) and all(p["targets"] and all(t["expr"] for t in p["targets"])
                                                   for p in d["panels"]), d["title"]
