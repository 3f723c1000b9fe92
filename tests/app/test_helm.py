"""deploy/helm/gpuwarden: rendered by the real ``helm template`` and validated by the real
``kubeconform -strict`` against Kubernetes v1.34's schemas (scripts/helm-check builds both with
``go install`` into .cache/go/bin the first time); what it renders is a deployment gpuwarden runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpuwarden.app.cli import build_parser
from gpuwarden.app.settings import load_settings

pytestmark = pytest.mark.helm

ROOT = Path(__file__).resolve().parents[2]
CHECK = [sys.executable, str(ROOT / "scripts" / "helm-check")]
BUILT = all((ROOT / ".cache" / "go" / "bin" / t).exists() for t in ("helm", "kubeconform"))
EVERYTHING = ["--set", "scheduler.enabled=true", "--set", "serviceMonitor.enabled=true",
              "--set", "secrets.FEISHU_WEBHOOK_URL=https://open.feishu.cn/x"]
MONITORS = ["--set", "scheduler.enabled=true", "--set", "podMonitor.enabled=true",
            "--set", "prometheusRule.enabled=true", "--set", "agent.kmsg.privileged=true"]
#: The README's Kafka login: the password by reference, in the chart's Secret.
SASL = ["--set", "scheduler.enabled=true", "--set", "config.kafka.security_protocol=SASL_PLAINTEXT",
        "--set", "config.kafka.sasl_mechanism=SCRAM-SHA-256", "--set", "config.kafka.sasl_username=gpuwarden",
        "--set", "config.kafka.sasl_password.env=KAFKA_PASSWORD", "--set", "secrets.KAFKA_PASSWORD=not-a-real-one"]
WORKLOADS = {("DaemonSet", "agent"), ("StatefulSet", "streams"), ("Deployment", "notify"), ("Deployment", "scheduler")}


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    if not BUILT and shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail("go is missing: scripts/helm-check builds helm and kubeconform with it")
        pytest.skip("go not installed (it builds helm and kubeconform)")


def helm_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CHECK, *args], capture_output=True, text=True, timeout=900)


def rendered(*values: str) -> dict[tuple[str, str], dict]:
    out = helm_check("--render-only", *values)
    assert out.returncode == 0, out.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out.stdout) if d}


def containers(docs: dict[tuple[str, str], dict]) -> dict[str, dict]:
    """The workloads' containers by component (agent, streams, notify, scheduler)."""
    return {c["name"]: c for (kind, _), d in docs.items() if kind in {k for k, _ in WORKLOADS}
            for c in d["spec"]["template"]["spec"]["containers"]}


@pytest.mark.parametrize("values", [[], EVERYTHING, MONITORS, SASL], ids=["defaults", "everything", "monitors", "sasl"])
def test_the_chart_renders_and_every_manifest_is_valid(values: list[str]) -> None:
    out = helm_check(*values)
    assert out.returncode == 0, out.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in out.stdout, out.stdout


def test_kubeconform_refuses_a_field_kubernetes_does_not_have(tmp_path: Path) -> None:
    rendered = helm_check("--render-only").stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(rendered.replace("hostPID: true", "hostPID: true\n      hostPid: true", 1))
    out = helm_check("--file", str(bad))
    assert out.returncode == 1 and "additional properties 'hostPid' not allowed" in out.stderr, out.stderr


def test_what_the_chart_renders_runs_gpuwarden(tmp_path: Path) -> None:
    docs = {(d["kind"], d["metadata"]["name"]): d
            for d in yaml.safe_load_all(helm_check("--render-only", *EVERYTHING).stdout) if d}
    config = tmp_path / "gpuwarden.yaml"
    config.write_text(docs["ConfigMap", "gpuwarden-gpuwarden-config"]["data"]["gpuwarden.yaml"])
    settings = load_settings(config)  # unknown keys would be errors
    assert (settings.agent.metrics_port, settings.engine.metrics_port, settings.notify.metrics_port,
            settings.scheduler.metrics_port) == (9400, 9401, 9402, 9403)
    agent = docs["DaemonSet", "gpuwarden-gpuwarden-agent"]["spec"]["template"]["spec"]
    assert agent["hostPID"] and agent["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    mounts = {m["mountPath"] for m in agent["containers"][0]["volumeMounts"]}
    assert {"/var/lib/kubelet/pod-resources", "/run/gpuwarden"} <= mounts
    assert str(settings.agent.pod_resources_socket.parent) in mounts
    notify = docs["Deployment", "gpuwarden-gpuwarden-notify"]["spec"]["template"]["spec"]["containers"][0]
    assert notify["envFrom"] == [{"secretRef": {"name": "gpuwarden-gpuwarden-secrets"}}]
    assert docs["Secret", "gpuwarden-gpuwarden-secrets"]["stringData"] == {"FEISHU_WEBHOOK_URL": "https://open.feishu.cn/x"}
    parser = build_parser()
    for kind, name in docs:
        for c in docs[kind, name].get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            parser.parse_args([a.replace("$(NODE_NAME)", "gpu-01").replace("$(POD_NAME)", "w-0") for a in c["args"]])
            assert c["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "metrics"}
            assert c["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "metrics"}


@pytest.mark.parametrize("values", [[], ["--set", "scheduler.enabled=true"]], ids=["defaults", "scheduler"])
def test_without_secrets_every_reference_is_optional_so_the_pods_start(values: list[str]) -> None:
    """No ``secrets:`` and no ``existingSecret``: no Secret is rendered, and a reference to a
    missing Secret that is not optional keeps the container from starting (CreateContainerConfigError)."""
    docs = rendered(*values)
    assert not [k for k in docs if k[0] == "Secret"]
    pods = containers(docs)
    assert set(pods) == {c for _, c in WORKLOADS} - ({"scheduler"} if not values else set())
    for name, c in pods.items():
        assert c["envFrom"] == [{"secretRef": {"name": "gpuwarden-gpuwarden-secrets", "optional": True}}], name
        assert not c.get("env", []) or all("secretKeyRef" not in e.get("valueFrom", {}) for e in c["env"]), name


def test_a_kafka_password_reaches_every_workload_that_reads_the_config(tmp_path: Path, monkeypatch) -> None:
    """The README's ``sasl_password: {env: KAFKA_PASSWORD}``: the agent, the streams worker, the
    notifier and the scheduler collector all load the one Secret that holds it (the agent and the
    collector used to exit 2, "secret variable KAFKA_PASSWORD is not set")."""
    docs = rendered(*SASL)
    secret = docs["Secret", "gpuwarden-gpuwarden-secrets"]
    assert set(secret["stringData"]) == {"KAFKA_PASSWORD"}
    pods = containers(docs)
    assert set(pods) == {c for _, c in WORKLOADS}
    for name, c in pods.items():
        assert c["envFrom"] == [{"secretRef": {"name": "gpuwarden-gpuwarden-secrets"}}], name
    annotations = {d["spec"]["template"]["metadata"]["annotations"]["checksum/secrets"]
                   for (kind, _), d in docs.items() if kind in {k for k, _ in WORKLOADS}}
    assert len(annotations) == 1  # a changed secret rolls every one of them
    config = tmp_path / "gpuwarden.yaml"
    config.write_text(docs["ConfigMap", "gpuwarden-gpuwarden-config"]["data"]["gpuwarden.yaml"])
    monkeypatch.setenv("KAFKA_PASSWORD", secret["stringData"]["KAFKA_PASSWORD"])  # what envFrom gives each pod
    kafka = load_settings(config).kafka
    assert (kafka.security_protocol, kafka.sasl_mechanism, kafka.sasl_username) == \
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "gpuwarden")


def test_an_existing_secret_is_required_and_not_rendered() -> None:
    docs = rendered("--set", "existingSecret=lab-gpuwarden", "--set", "secrets.IGNORED=x")
    assert not [k for k in docs if k[0] == "Secret"]
    for c in containers(docs).values():
        assert c["envFrom"] == [{"secretRef": {"name": "lab-gpuwarden"}}]


def test_the_scheduler_has_requests_and_the_monitors_and_rules_render() -> None:
    docs = rendered(*MONITORS)
    scheduler = containers(docs)["scheduler"]
    assert scheduler["resources"]["requests"] == {"cpu": "50m", "memory": "128Mi"}
    assert {n for k, n in docs if k == "PodMonitor"} == {f"gpuwarden-gpuwarden-{c}" for _, c in WORKLOADS}
    for (kind, _), d in docs.items():
        if kind == "PodMonitor":
            endpoint = d["spec"]["podMetricsEndpoints"][0]
            assert endpoint["port"] == "metrics" and endpoint["relabelings"][0]["replacement"].startswith("gpuwarden-")
    rule = docs["PrometheusRule", "gpuwarden-gpuwarden-pipeline"]
    shipped = yaml.safe_load((ROOT / "deploy" / "prometheus" / "gpuwarden-rules.yml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]


def test_the_kernel_log_is_read_only_by_a_privileged_agent() -> None:
    """An unprivileged container cannot open a hostPath device (docs/kubernetes.md, "Kernel log"):
    by default no /dev/kmsg mount (the agent reports kmsg unavailable); with agent.kmsg.privileged
    the mount and a privileged container."""
    default = containers(rendered())["agent"]
    assert "/dev/kmsg" not in {m["mountPath"] for m in default["volumeMounts"]}
    assert not default["securityContext"].get("privileged")
    kmsg = containers(rendered("--set", "agent.kmsg.privileged=true"))["agent"]
    assert "/dev/kmsg" in {m["mountPath"] for m in kmsg["volumeMounts"]}
    assert kmsg["securityContext"]["privileged"] is True
