"""Cordon and taint through the official Kubernetes client, against a loopback API server.

No kube-apiserver runs here (building one from the Go module cache needs etcd, which is not
there), so, as tests/producers/test_kube.py does, the server below is built from the documented
API: ``GET /api/v1/nodes/{name}`` returns the Node (https://kubernetes.io/docs/reference/kubernetes-api/cluster-resources/node-v1/),
``PATCH`` with ``Content-Type: application/merge-patch+json`` applies RFC 7386 (objects merge,
lists are replaced, null deletes) and, when the patch names ``metadata.resourceVersion``, answers
409 with a ``Status`` of reason ``Conflict`` if the Node changed since ("API Concepts: Resource
versions"; the optimistic concurrency kubectl relies on)."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpuwarden.app.cli import main
from gpuwarden.contract import RemediationOutcome, Topics
from gpuwarden.remediation.act import Remediator, Target, audit_trail
from gpuwarden.remediation.backends import KubernetesBackend
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.spool import Spool
from tests.fakes.kubeconfig import loopback_kubeconfig
from tests.remediation.support import alert, config, spool_alerts

TAINT = "gpuwarden.io/remediation"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def merge_patch(doc: object, patch: object) -> object:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return patch
    out = dict(doc) if isinstance(doc, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class Api(BaseHTTPRequestHandler):
    def _node(self) -> str | None:
        prefix = "/api/v1/nodes/"
        name = self.path.split("?")[0].removeprefix(prefix)
        return name if self.path.startswith(prefix) and name in self.server.nodes else None  # type: ignore[attr-defined]

    def _send(self, code: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _status(self, code: int, reason: str, message: str) -> None:
        self._send(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason,
                          "message": message, "code": code})

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        name = self._node()
        if name is None:
            return self._status(404, "NotFound", f'nodes "{self.path}" not found')
        self._send(200, self.server.nodes[name])  # type: ignore[attr-defined]

    def do_PATCH(self) -> None:  # noqa: N802
        name = self._node()
        patch = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.patches.append((self.headers["Content-Type"], patch))  # type: ignore[attr-defined]
        if name is None:
            return self._status(404, "NotFound", "node not found")
        if self.headers["Content-Type"] != "application/merge-patch+json":
            return self._status(415, "UnsupportedMediaType", "this test server speaks merge patches only")
        with self.server.lock:  # type: ignore[attr-defined]
            if self.server.race:  # type: ignore[attr-defined] - someone else writes between our GET and PATCH
                self.server.race = False  # type: ignore[attr-defined]
                self._bump(name)
            node = self.server.nodes[name]  # type: ignore[attr-defined]
            want = (patch.get("metadata") or {}).get("resourceVersion")
            if want is not None and want != node["metadata"]["resourceVersion"]:
                return self._status(409, "Conflict", 'Operation cannot be fulfilled on nodes "%s": the object has '
                                    "been modified; please apply your changes to the latest version and try again" % name)
            self.server.nodes[name] = merge_patch(node, patch)  # type: ignore[attr-defined]
            self._bump(name)
        self._send(200, self.server.nodes[name])  # type: ignore[attr-defined]

    def _bump(self, name: str) -> None:
        meta = self.server.nodes[name]["metadata"]  # type: ignore[attr-defined]
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)

    def log_message(self, *args: object) -> None:
        pass


def _node(name: str, **spec: object) -> dict:
    return {"kind": "Node", "apiVersion": "v1",
            "metadata": {"name": name, "resourceVersion": "100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
            "spec": {"taints": [GPU_TAINT], **spec},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]}}


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ThreadingHTTPServer, Path]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    server.nodes = {"gpu-a": _node("gpu-a"), "gpu-b": _node("gpu-b", unschedulable=True)}  # type: ignore[attr-defined]
    server.patches, server.lock, server.race = [], threading.Lock(), False  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = loopback_kubeconfig(tmp_path / "kubeconfig", server.server_port)
    try:
        yield server, cfg
    finally:
        server.shutdown()


def test_cordon_with_a_taint_and_uncordon_through_the_cli(api, tmp_path: Path, capsys) -> None:
    server, kubeconfig = api
    a = alert("gpu-a", "xid-node-repeated")
    spool_alerts(tmp_path / "spool.db", a)
    cfg = str(config(tmp_path, backend="kubernetes", kubernetes={"kubeconfig": str(kubeconfig)}))
    assert main(["act", a.fingerprint, "drain", "--config", cfg, "--by", "dave"]) == 0
    spec = server.nodes["gpu-a"]["spec"]
    value = f"gpuwarden__xid-node-repeated_{a.fingerprint}"[:63]  # a label value: 63 characters at most
    ours = {"key": TAINT, "value": value, "effect": "NoSchedule"}
    assert spec["unschedulable"] is True and spec["taints"] == [GPU_TAINT, ours]  # the device plugin's taint kept
    assert server.patches[0][0] == "application/merge-patch+json"
    assert server.patches[0][1]["metadata"] == {"resourceVersion": "100"}
    assert main(["act", a.fingerprint, "drain", "--config", cfg]) == 0
    assert "already drained by gpuwarden" in capsys.readouterr().out and len(server.patches) == 1
    assert main(["act", a.fingerprint, "resume", "--config", cfg]) == 0
    spec = server.nodes["gpu-a"]["spec"]
    assert spec["unschedulable"] is False and spec["taints"] == [GPU_TAINT]
    with Spool(tmp_path / "spool.db") as spool:
        assert [(r.action, r.outcome, r.backend) for r in audit_trail(spool, Topics())] == [
            ("drain", RemediationOutcome.DONE, "kubernetes"), ("drain", RemediationOutcome.ALREADY, "kubernetes"),
            ("resume", RemediationOutcome.DONE, "kubernetes")]


def _remediator(kubeconfig: Path, records: list) -> Remediator:
    return Remediator(KubernetesBackend.connect(str(kubeconfig), timeout_s=10), RemediationConfig(backend="kubernetes"),
                      records.append)


def test_a_node_someone_else_cordoned_is_left_alone(api) -> None:
    server, kubeconfig = api
    records: list = []
    r = _remediator(kubeconfig, records)
    t = Target("fp-b", "xid-hardware", "gpu-b", firing=True)
    assert r.act(t, "drain", "erin").outcome is RemediationOutcome.ALREADY
    assert r.act(t, "resume", "erin").outcome is RemediationOutcome.REFUSED
    assert server.patches == [] and server.nodes["gpu-b"]["spec"]["unschedulable"] is True


def test_a_change_between_read_and_patch_is_a_conflict_not_a_lost_write(api) -> None:
    server, kubeconfig = api
    server.race = True
    records: list = []
    rec = _remediator(kubeconfig, records).act(Target("fp-a", "xid-hardware", "gpu-a", firing=True), "drain", "erin")
    assert rec.outcome is RemediationOutcome.FAILED and "409" in rec.detail
    assert "unschedulable" not in server.nodes["gpu-a"]["spec"]


def test_an_api_server_that_is_gone_is_a_failure(api) -> None:
    server, kubeconfig = api
    server.shutdown()
    server.server_close()
    records: list = []
    rec = _remediator(kubeconfig, records).act(Target("fp-a", "xid-hardware", "gpu-a", firing=True), "drain", "erin")
    assert rec.outcome is RemediationOutcome.FAILED and rec.detail.startswith("kubernetes: ")
    assert records == [rec]
