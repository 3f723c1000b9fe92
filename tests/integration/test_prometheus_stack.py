"""The real Prometheus (Debian's, scripts/prometheus-local) scrapes a real agent (simulator), a
stream worker and a notifier on a real broker, evaluating deploy/prometheus/'s rules: every panel
of deploy/grafana/'s dashboards returns data, and ``promtool check metrics`` finds nothing in
any of the three but the names dcgm-exporter itself uses (issue #21)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwarden.contract import Topics
from gpuwarden.producers.xid import lookup
from tests.fakes.http import FakeWebhook
from tests.kafka_support import create_topic, produce, unique_topic
from tests.producers.test_metrics import free_port
from tests.streams_kafka.records import keyed, snapshot, xid

pytestmark = [pytest.mark.kafka, pytest.mark.prometheus]

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "deploy" / "grafana").glob("*.json"))
RULES = REPO / "deploy" / "prometheus" / "gpuwarden-rules.yml"
#: Grafana's variables, as a dashboard opened on "all" with a 1 s scrape would fill them.
VARIABLES = {"$__rate_interval": "15s", "$Hostname": ".+", "$task_class": ".+", "$statistic": ".+"}
#: promtool's complaints about dcgm-exporter's own names, which the agent keeps for parity: its
#: camelCase labels (modelName, UUID, Hostname), and of its counters, the ``_total`` they lack
#: and the type in DCGM_FI_DEV_PCIE_REPLAY_COUNTER's name.
DCGM_NAMES = re.compile(r"label names should be written in 'snake_case' not 'camelCase'"
                        r"|^DCGM_FI_DEV_\w+ counter metrics should have \"_total\" suffix"
                        r"|^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'")
PROBE = "probe-node"


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, expr) of every target of every panel, variables filled."""
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for var, value in VARIABLES.items():
                    expr = expr.replace(var, value)
                assert "$" not in expr, (path.name, panel["title"], expr)
                out.append((path.name, panel["title"], expr))
    return out


def query(url: str, expr: str) -> list[Any]:
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def config(tmp: Path, bootstrap: str, prefix: str, ports: dict[str, int], name: str) -> Path:
    """One process's config: the same sections, its own spool (a spool is one process's log)."""
    cfg = {
        "kafka": {"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 2},
        "spool": {"path": str(tmp / name / "spool.db")},
        "agent": {"metrics_port": ports["agent"]},
        # Minutes of history squeezed into seconds, so the simulated tasks' classes get baselines.
        "engine": {"metrics_port": ports["streams"], "checkpoint_interval": "1s", "bucket": "1s",
                   "summary_interval": "5s", "observation_period": "10s", "baseline_min_samples": 3,
                   "baseline_refresh": "1s", "summary_lateness": "10s"},
        "notify": {"metrics_port": ports["notify"], "consumer_group": f"notify-{prefix}", "tick_interval": "200ms",
                   "receivers": [{"name": "team", "webhook": {"url": {"env": "GW_TEST_WEBHOOK_URL"}}}],
                   "route": {"receivers": ["team"], "group_by": ["rule", "node"], "group_wait": "0s",
                             "group_interval": "1s", "repeat_interval": "1h"}},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def start(args: list[str], tmp: Path, name: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = (tmp / f"{name}.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", *args], stdout=log, stderr=subprocess.STDOUT,
                            cwd=REPO, env={**env, "PYTHONUNBUFFERED": "1"})


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def lint(body: str) -> list[str]:
    """``promtool check metrics`` on one scrape: its problems, one a line."""
    out = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=60)
    return [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]


def test_prometheus_scrapes_the_pipeline_and_every_dashboard_panel_has_data(kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = unique_topic("gw") + "."
    topics = Topics(prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.alerts):
        asyncio.run(create_topic(kafka_bootstrap, t, partitions=2))
    ports = {name: free_port() for name in ("agent", "streams", "notify")}
    cfg = {name: config(tmp_path, kafka_bootstrap, prefix, ports, name) for name in ports}
    prom_env = {**os.environ, "PROMETHEUS_LOCAL_DIR": str(tmp_path / "prometheus")}
    local = [sys.executable, str(REPO / "scripts" / "prometheus-local")]
    procs: list[subprocess.Popen[bytes]] = []
    with FakeWebhook() as hook:
        hook.script.append((503, {}, b"try later"))  # the first delivery is retried: retries count
        env = {**os.environ, "GW_TEST_WEBHOOK_URL": hook.base + "/hook"}
        try:
            procs += [start(["agent", "--config", str(cfg["agent"]), "--simulate", "healthy", "--nodes", "1", "--gpus", "2"],
                            tmp_path, "agent", env),
                      start(["-v", "streams", "--config", str(cfg["streams"]), "--worker-id", "w1",
                             "--data-dir", str(tmp_path / "w1")], tmp_path, "streams", env),
                      start(["notify", "--config", str(cfg["notify"])], tmp_path, "notify", env)]
            started = subprocess.run([*local, "start", "--interval", "1s", "--rules", str(RULES),
                                      *(a for p in ports.values() for a in ("--target", f"127.0.0.1:{p}"))],
                                     capture_output=True, text=True, timeout=300, env=prom_env)
            assert started.returncode == 0, started.stderr
            url = started.stdout.strip().splitlines()[-1]
            # A node of the test's own: ten minutes of samples with an XID 79 inside (a critical alert once
            # its bucket closes), and one record that is not JSON (a dead letter).
            now = time.time()
            records = [snapshot(PROBE, i, now - 600 + 5 * i) for i in range(120)]
            asyncio.run(produce(kafka_bootstrap, topics.samples, [*keyed(records), (PROBE.encode(), b"not json")]))
            hardware = xid(PROBE, 0, now - 450, 79).model_copy(update={"catalogue": lookup(79)})  # as an agent sends it
            asyncio.run(produce(kafka_bootstrap, topics.events, keyed([hardware])))
            queries = panel_queries()
            delivered_expr = 'sum(gpuwarden_notify_deliveries_total{outcome="delivered"}) > 0'
            deadline, empty, delivered = time.monotonic() + 120, queries, []
            while (empty or not delivered) and time.monotonic() < deadline:
                time.sleep(2)
                assert all(p.poll() is None for p in procs), [(tmp_path / f"{n}.log").read_text()[-2000:]
                                                            for n in ("agent", "streams", "notify")]
                empty = [q for q in queries if not query(url, q[2])]
                delivered = query(url, delivered_expr)  # the alert went through to the webhook
            assert not empty, f"panels without data: {empty}"
            assert delivered, "no delivery seen by Prometheus"
            problems = {name: [p for p in lint(scrape(port)) if not DCGM_NAMES.search(p)] for name, port in ports.items()}
            rules = json.load(urllib.request.urlopen(f"{url}/api/v1/rules", timeout=10))["data"]["groups"]
            retried = query(url, "gpuwarden_notify_retries_total")
            dead = query(url, "gpuwarden_streams_dead_letters_total")
            transitions = query(url, 'gpuwarden_streams_transitions_total{state="firing"}')
        finally:
            subprocess.run([*local, "stop"], capture_output=True, env=prom_env, timeout=60)
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
    assert problems == {"agent": [], "streams": [], "notify": []}, problems
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    assert float(retried[0]["value"][1]) >= 1
    assert [(d["metric"]["topic"], d["metric"]["reason"], d["value"][1]) for d in dead] == [(topics.samples, "json", "1")]
    assert any(t["metric"]["tier"] == "critical" for t in transitions), transitions
    assert hook.accepted and hook.accepted[0].json["alerts"][0]["labels"]["node"] == PROBE
