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


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    if not BUILT and shutil.which("go") is None:
        if os.environ.get("CI"):
            pytest.fail("go is missing: scripts/helm-check builds helm and kubeconform with it")
        pytest.skip("go not installed (it builds helm and kubeconform)")


def helm_check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CHECK, *args], capture_output=True, text=True, timeout=900)


@pytest.mark.parametrize("values", [[], EVERYTHING], ids=["defaults", "everything"])
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
    assert {"/var/lib/kubelet/pod-resources", "/dev/kmsg", "/run/gpuwarden"} <= mounts
    assert str(settings.agent.pod_resources_socket.parent) in mounts
    notify = docs["Deployment", "gpuwarden-gpuwarden-notify"]["spec"]["template"]["spec"]["containers"][0]
    assert notify["envFrom"] == [{"secretRef": {"name": "gpuwarden-gpuwarden-secrets"}}]
    assert docs["Secret", "gpuwarden-gpuwarden-secrets"]["stringData"] == {"FEISHU_WEBHOOK_URL": "https://open.feishu.cn/x"}
    parser = build_parser()
    for kind, name in docs:
        for c in docs[kind, name].get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            parser.parse_args([a.replace("$(NODE_NAME)", "gpu-01").replace("$(POD_NAME)", "w-0") for a in c["args"]])
            probe = c.get("readinessProbe", {}).get("httpGet", {})
            assert probe in ({}, {"path": "/-/healthy", "port": "metrics"})
