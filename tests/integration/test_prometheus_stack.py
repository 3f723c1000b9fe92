"""The real Prometheus (Debian's, scripts/prometheus-local) scrapes a real agent (simulator, and
scraping a vLLM-shaped endpoint), a scheduler collector polling a real Slurm, a stream worker and a
notifier on a real broker, evaluating deploy/prometheus/'s rules: every panel of deploy/grafana/'s
dashboards returns data, and ``promtool check metrics`` finds nothing in any of the four but the
names dcgm-exporter itself uses (issue #21)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwarden.contract import GpuSample, NodeSnapshot, Topics
from gpuwarden.producers.xid import lookup
from tests.fakes.http import FakeWebhook
from tests.fakes.vllm import FakeVllm, Request
from tests.hang import HANG_S
from tests.kafka_support import create_topic, produce, unique_topic
from tests.producers.test_metrics import free_port
from tests.slurm_support import LocalSlurm
from tests.streams_kafka.records import keyed, snapshot, xid

pytestmark = [pytest.mark.kafka, pytest.mark.prometheus, pytest.mark.slurm]

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "deploy" / "grafana").glob("*.json"))
RULES = REPO / "deploy" / "prometheus" / "gpuwarden-rules.yml"
#: Grafana's variables, as a dashboard opened on "all" with a 1 s scrape would fill them.
VARIABLES = {"$__rate_interval": "15s", "$Hostname": ".+", "$task_class": ".+", "$statistic": ".+",
             "$cluster": ".+", "$partition": ".+", "$service": ".+", "$model": ".+"}
#: promtool's complaints about dcgm-exporter's own names, which the agent keeps for parity: its
#: camelCase labels (modelName, UUID, Hostname), and of its counters, the ``_total`` they lack
#: and the type in DCGM_FI_DEV_PCIE_REPLAY_COUNTER's name.
DCGM_NAMES = re.compile(r"label names should be written in 'snake_case' not 'camelCase'"
                        r"|^DCGM_FI_DEV_\w+ counter metrics should have \"_total\" suffix"
                        r"|^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'")
PROBE = "probe-node"
SERVICE, MODEL = "chat", "qwen2-7b"


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


def config(tmp: Path, bootstrap: str, prefix: str, ports: dict[str, int], name: str, vllm_url: str) -> Path:
    """One process's config: the same sections, its own spool (a spool is one process's log)."""
    cfg = {
        "kafka": {"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": 2},
        "spool": {"path": str(tmp / name / "spool.db")},
        "agent": {"metrics_port": ports["agent"],
                  "inference": {"interval": "1s", "targets": [{"url": vllm_url, "engine": "vllm", "service": SERVICE}]}},
        "scheduler": {"metrics_port": ports["scheduler"], "cluster": "local", "interval": "1s"},
        # Minutes of history squeezed into seconds, so the simulated tasks' classes get baselines.
        "engine": {"metrics_port": ports["streams"], "commit_interval": "1s", "bucket": "1s",
                   "summary_interval": "5s", "observation_period": "10s", "baseline_min_samples": 3,
                   "baseline_refresh": "1s", "summary_lateness": "10s", "allowed_lateness": "2s",
                   "slo": {SERVICE: {"ttft_p99": "250ms", "error_rate": "5%", "window": "1h"}}},
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


def serve_requests(vllm: FakeVllm, stop: threading.Event) -> None:
    """Requests finishing on the fake vLLM while the test runs: one in ten aborted, one in ten slow."""
    n = 0
    while not stop.wait(0.1):
        n += 1
        slow = n % 10 == 0
        vllm.metrics.finish(MODEL, Request(ttft=0.6 if slow else 0.05, itl=[0.02] * 5, e2e=1.2 if slow else 0.3,
                                           queue=0.01, prompt_tokens=100,
                                           finished_reason="abort" if n % 10 == 5 else "stop"))
        vllm.metrics.running.labels(MODEL, "0").set(n % 4)
        vllm.metrics.waiting.labels(MODEL, "0").set(n % 3)
        vllm.metrics.kv.labels(MODEL, "0").set(0.2 + (n % 5) / 10)


def held_gpus(node: str, seq: int, ts: float) -> NodeSnapshot:
    """A Slurm node's GPUs as its agent would send them: 0 and 1 (the job's) idle, 2 and 3 busy."""
    return NodeSnapshot.of(node=node, seq=seq, boot_id="b1", agent_version="test", ts=ts,
                           gpus=[GpuSample(index=i, uuid=f"GPU-{node}-{i}", util_gpu=0.0 if i < 2 else 90.0)
                                 for i in range(4)])


def lint(body: str) -> list[str]:
    """``promtool check metrics`` on one scrape: its problems, one a line."""
    out = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True, text=True, timeout=60)
    return [line for line in (out.stdout + out.stderr).splitlines() if line.strip()]


def test_prometheus_scrapes_the_pipeline_and_every_dashboard_panel_has_data(kafka_bootstrap: str, slurm: LocalSlurm,
                                                                           tmp_path: Path) -> None:
    prefix = unique_topic("gw") + "."
    topics = Topics(prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.alerts, topics.inference,
              topics.sli, topics.jobs, topics.allocations):
        asyncio.run(create_topic(kafka_bootstrap, t, partitions=2))
    ports = {name: free_port() for name in ("agent", "scheduler", "streams", "notify")}
    vllm, serving = FakeVllm([MODEL]), threading.Event()
    cfg = {name: config(tmp_path, kafka_bootstrap, prefix, ports, name, vllm.url) for name in ports}
    prom_env = {**os.environ, "PROMETHEUS_LOCAL_DIR": str(tmp_path / "prometheus")}
    local = [sys.executable, str(REPO / "scripts" / "prometheus-local")]
    procs: list[subprocess.Popen[bytes]] = []
    slurm.fragment()  # two jobs running (gn1, gn2), one pending on fragmentation, one behind it
    threading.Thread(target=serve_requests, args=(vllm, serving), daemon=True).start()
    with FakeWebhook() as hook:
        hook.script.append((503, {}, b"try later"))  # the first delivery is retried: retries count
        env = {**os.environ, "GW_TEST_WEBHOOK_URL": hook.base + "/hook"}
        try:
            procs += [start(["agent", "--config", str(cfg["agent"]), "--simulate", "healthy", "--nodes", "1", "--gpus", "2"],
                            tmp_path, "agent", env),
                      start(["scheduler", "--slurm", "--config", str(cfg["scheduler"])], tmp_path, "scheduler",
                            {**env, **slurm.env}),
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
            idle_expr = 'sum(gpuwarden_streams_scheduler_allocated_gpus{use="idle"}) == 4'
            # Until every panel has data: the bound only catches a hang (#33; 120 s ran out once in a full
            # run with three pytest workers while Slurm's scheduler panels were still filling).
            deadline, empty, delivered, joined = time.monotonic() + HANG_S, queries, [], []
            seq = 0
            while (empty or not delivered or not joined) and time.monotonic() < deadline:
                time.sleep(2)
                # The Slurm nodes' GPUs, read as their agents would: the join with the jobs' allocations.
                seq += 1
                asyncio.run(produce(kafka_bootstrap, topics.samples,
                                    keyed([held_gpus(n, seq, time.time()) for n in ("gn1", "gn2")])))
                assert all(p.poll() is None for p in procs), [(tmp_path / f"{n}.log").read_text()[-2000:]
                                                            for n in ports]
                empty = [q for q in queries if not query(url, q[2])]
                delivered = query(url, delivered_expr)  # the alert went through to the webhook
                joined = query(url, idle_expr)  # gn1's and gn2's jobs hold GPUs 0 and 1, idle in their samples
            assert not empty, f"panels without data: {empty}"
            assert delivered, "no delivery seen by Prometheus"
            problems = {name: [p for p in lint(scrape(port)) if not DCGM_NAMES.search(p)] for name, port in ports.items()}
            rules = json.load(urllib.request.urlopen(f"{url}/api/v1/rules", timeout=10))["data"]["groups"]
            retried = query(url, "gpuwarden_notify_retries_total")
            dead = query(url, "gpuwarden_streams_dead_letters_total")
            transitions = query(url, 'gpuwarden_streams_transitions_total{state="firing"}')
            fragmented = query(url, "gpuwarden_streams_scheduler_fragmented_jobs")
            failed = query(url, 'gpuwarden_inference_requests_total{outcome="failed"}')
        finally:
            serving.set()
            vllm.close()
            slurm.cancel_all()
            subprocess.run([*local, "stop"], capture_output=True, env=prom_env, timeout=60)
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=120)
    assert problems == {"agent": [], "scheduler": [], "streams": [], "notify": []}, problems
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    assert float(retried[0]["value"][1]) >= 1
    assert [(d["metric"]["topic"], d["metric"]["reason"], d["value"][1]) for d in dead] == [(topics.samples, "json", "1")]
    assert any(t["metric"]["tier"] == "critical" for t in transitions), transitions
    # The joins only the worker makes: the jobs' idle GPUs, and the 4-GPU job waiting on
    # fragmentation (2 free on each node).
    assert joined, "allocated GPUs not joined with the nodes' samples"
    assert [(f["metric"]["cluster"], f["value"][1]) for f in fragmented] == [("local", "1")], fragmented
    assert float(failed[0]["value"][1]) >= 1 and failed[0]["metric"]["service"] == SERVICE, failed
    assert hook.accepted and hook.accepted[0].json["alerts"][0]["labels"]["node"] == PROBE
