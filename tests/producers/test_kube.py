"""The Kubernetes collector through the official client against a loopback API server.

No API server runs here, so the server below answers ``GET /api/v1/pods`` and
``GET /api/v1/nodes`` with PodList/NodeList documents shaped as the Kubernetes API reference
documents them (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/,
list pagination with ``limit``/``continue`` as in "API Concepts: Retrieving large results sets
in chunks"), including a pod pending as ``Unschedulable`` with the scheduler's own message, an
OOM-killed one and a cordoned node.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from gpuwarden.contract import JobState, decode, encode
from gpuwarden.producers.kube import KubeApi
from tests.fakes.kubeconfig import loopback_kubeconfig

CREATED = "2026-12-01T10:00:00Z"


def _pod(name: str, ns: str, gpus: int, phase: str, node: str | None = None, **status: object) -> dict:
    container = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
    return {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": CREATED,
                         "labels": {"job-name": name.rsplit("-", 1)[0], "kueue.x-k8s.io/queue-name": "research"}},
            "spec": {"containers": [container], "schedulerName": "default-scheduler",
                     **({"nodeName": node} if node else {})},
            "status": {"phase": phase, **status}}


PODS = [
    _pod("llama-7b-0", "fm", 8, "Running", "gpu-a", startTime="2026-12-01T10:00:30Z",
         containerStatuses=[{"name": "main", "image": "x", "imageID": "x", "ready": True, "restartCount": 2,
                             "state": {"running": {"startedAt": "2026-12-01T10:00:31Z"}}}]),
    _pod("sweep-3", "fm", 4, "Pending", conditions=[{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) were unschedulable.",
        "lastTransitionTime": CREATED}]),
    _pod("oom-1", "vision", 1, "Failed", "gpu-a", startTime="2026-12-01T10:01:00Z",
         containerStatuses=[{"name": "main", "image": "x", "imageID": "x", "ready": False, "restartCount": 0,
                             "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                      "startedAt": "2026-12-01T10:01:01Z",
                                                      "finishedAt": "2026-12-01T10:05:00Z"}}}]),
    _pod("web-0", "ops", 0, "Running", "cpu-1", startTime=CREATED),  # no GPUs: not a GPU job
]


def _node(name: str, gpus: int, cordoned: bool = False) -> dict:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H200"}},
            "spec": {"unschedulable": True} if cordoned else {},
            "status": {"allocatable": {"cpu": "96", "nvidia.com/gpu": str(gpus)},
                       "capacity": {"cpu": "96", "nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


NODES = [_node("gpu-a", 8), _node("gpu-b", 8, cordoned=True),
         {"metadata": {"name": "cpu-1"}, "spec": {}, "status": {"allocatable": {"cpu": "8"}}}]


class Api(BaseHTTPRequestHandler):
    """Lists in pages of ``limit`` with an opaque ``continue`` token, as the API server does."""

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        url = urlparse(self.path)
        q = parse_qs(url.query)
        kinds = {"/api/v1/pods": ("PodList", PODS), "/api/v1/nodes": ("NodeList", NODES)}
        if url.path not in kinds:
            self.send_error(404)
            return
        kind, items = kinds[url.path]
        start = int(q.get("continue", ["0"])[0])
        limit = int(q.get("limit", [str(len(items))])[0])
        page, more = items[start:start + limit], start + limit < len(items)
        self.server.requests.append(url.path + ("?continue" if "continue" in q else ""))  # type: ignore[attr-defined]
        body = json.dumps({"kind": kind, "apiVersion": "v1",
                           "metadata": {"resourceVersion": "4711", **({"continue": str(start + limit)} if more else {})},
                           "items": page}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Api)
    server.requests = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    cfg = loopback_kubeconfig(tmp_path / "kubeconfig", server.server_port)
    try:
        yield cfg, server.requests  # type: ignore[attr-defined]
    finally:
        server.shutdown()


def test_pods_asking_for_gpus_and_the_nodes_gpus(kubeconfig: tuple[Path, list[str]]) -> None:
    cfg, requests = kubeconfig
    jobs, nodes = asyncio.run(KubeApi(str(cfg), page=2).poll("k8s", 1_796_000_000.0))
    for r in (*jobs, *nodes):
        assert decode(encode(r)) == r
    got = {j.job_id: j for j in jobs}
    assert set(got) == {"fm/llama-7b-0", "fm/sweep-3", "vision/oom-1"}  # web-0 asks for no GPU
    run = got["fm/llama-7b-0"]
    assert (run.state, run.gpus, run.nodes, run.gpu_type, run.restarts) == \
        (JobState.RUNNING, 8, ["gpu-a"], "NVIDIA-H200", 2)
    assert (run.name, run.account, run.queue, run.submit_time) == ("llama-7b", "fm", "research", 1_796_119_200.0)
    assert run.start_time == 1_796_119_230.0 and run.end_time is None and run.exit_code is None
    pending = got["fm/sweep-3"]
    assert (pending.state, pending.reason, pending.nodes, pending.start_time) == \
        (JobState.PENDING, "Unschedulable", [], None)
    oom = got["vision/oom-1"]
    assert (oom.state, oom.reason, oom.exit_code, oom.end_time) == \
        (JobState.OUT_OF_MEMORY, "OOMKilled", 137, 1_796_119_500.0)
    capacity = {n.node: (n.gpus_total, n.gpus_allocated, n.state) for n in nodes}
    assert capacity == {"gpu-a": (8, 8, "ready"), "gpu-b": (8, 0, "ready+cordoned")}  # the ended pod frees its GPU
    assert requests.count("/api/v1/pods?continue") == 1  # 4 pods in pages of 2: the second page by its token
