"""The agent's pod/namespace/container labels from the kubelet's pod-resources API, against a
loopback gRPC server on a unix socket that implements ``v1.PodResourcesLister/List`` from the
vendored proto (k8s.io/kubelet v0.34.1): no kubelet runs here."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.producers import podresources_pb2 as pb
from gpuwarden.producers.podresources import LIST_METHOD, PodRef, gpu_owners
from tests.producers.test_metrics import free_port

REPO = Path(__file__).resolve().parents[2]


def pod(name: str, namespace: str, *containers: tuple[str, str, list[str]]) -> pb.PodResources:
    return pb.PodResources(name=name, namespace=namespace, containers=[
        pb.ContainerResources(name=c, devices=[pb.ContainerDevices(resource_name=r, device_ids=ids)])
        for c, r, ids in containers])


class FakeKubelet:
    """``List`` answers whatever ``pods`` holds now; counts the calls."""

    def __init__(self, socket_path: Path) -> None:
        self.pods: list[pb.PodResources] = []
        self.calls = 0
        self._lock = threading.Lock()

        def list_pods(request: pb.ListPodResourcesRequest, context: grpc.ServicerContext) -> pb.ListPodResourcesResponse:
            with self._lock:
                self.calls += 1
                return pb.ListPodResourcesResponse(pod_resources=self.pods)

        service, method = LIST_METHOD.strip("/").split("/")
        handler = grpc.method_handlers_generic_handler(service, {method: grpc.unary_unary_rpc_method_handler(
            list_pods, request_deserializer=pb.ListPodResourcesRequest.FromString,
            response_serializer=pb.ListPodResourcesResponse.SerializeToString)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
        self.server.add_insecure_port(f"unix://{socket_path}")

    def set(self, pods: list[pb.PodResources]) -> None:
        with self._lock:
            self.pods = pods


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[tuple[FakeKubelet, Path]]:
    sock = tmp_path / "kubelet.sock"
    k = FakeKubelet(sock)
    k.server.start()
    try:
        yield k, sock
    finally:
        k.server.stop(grace=None)


def test_owners_are_read_by_uuid_replica_and_index_and_other_resources_are_ignored() -> None:
    response = pb.ListPodResourcesResponse(pod_resources=[
        pod("train-0", "ml", ("trainer", "nvidia.com/gpu", ["GPU-aaa", "GPU-bbb"]),
            ("sidecar", "example.com/nic", ["GPU-ccc"])),  # not a GPU resource
        pod("infer-1", "serving", ("server", "nvidia.com/gpu", ["GPU-ccc::1"])),  # a time-sliced replica
        pod("infer-0", "serving", ("server", "nvidia.com/gpu", ["GPU-ccc::0"])),  # same GPU: first by name wins
        pod("mig", "ml", ("job", "nvidia.com/mig-1g.18gb", ["MIG-ddd"])),
        pod("by-index", "ml", ("job", "nvidia.com/gpu", ["3"])),
    ])
    owners = gpu_owners(response)
    assert owners == {"GPU-aaa": PodRef("train-0", "ml", "trainer"), "GPU-bbb": PodRef("train-0", "ml", "trainer"),
                      "GPU-ccc": PodRef("infer-0", "serving", "server"), "MIG-ddd": PodRef("mig", "ml", "job"),
                      "3": PodRef("by-index", "ml", "job")}


def test_vendored_messages_match_the_proto() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "gen-podresources"), "--check"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def _gpu_series(port: int) -> dict[str, dict[str, str]]:
    """gpu index → labels of its DCGM_FI_DEV_GPU_UTIL series."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    return {s.labels["gpu"]: s.labels for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples}


def _wait(cond, timeout: float = 300.0):  # noqa: ANN001, ANN202 - returns at the event; the bound catches a hang
    deadline = time.monotonic() + timeout
    while True:
        try:
            if got := cond():
                return got
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.2)


def test_a_running_agent_labels_gpus_with_their_pods_and_follows_changes(kubelet, tmp_path: Path) -> None:
    fake, sock = kubelet
    fake.set([pod("train-0", "ml", ("trainer", "nvidia.com/gpu", ["0"]))])
    port = free_port()
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(f"spool:\n  path: {tmp_path / 'spool.db'}\nagent:\n  metrics_port: {port}\n"
                   f"  pod_resources_socket: {sock}\n  pod_resources_refresh: 500ms\n")
    agent = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(cfg),
                              "--simulate", "healthy", "--nodes", "1", "--gpus", "2",
                              "--output", str(tmp_path / "out.jsonl")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first = _wait(lambda: (s := _gpu_series(port)) and len(s) == 2 and s)
        assert (first["0"]["pod"], first["0"]["namespace"], first["0"]["container"]) == ("train-0", "ml", "trainer")
        assert "pod" not in first["1"] or first["1"]["pod"] == ""  # unassigned: empty (Prometheus drops it)
        assert first["0"]["pci_bus_id"] and first["0"]["device"] == "nvidia0" and first["0"]["DCGM_FI_DRIVER_VERSION"]
        # The pod on GPU 0 ends; one takes GPU 1 by its UUID: the labels follow at the next List.
        fake.set([pod("infer-0", "serving", ("server", "nvidia.com/gpu", [first["1"]["UUID"] + "::0"]))])
        later = _wait(lambda: (s := _gpu_series(port)).get("1", {}).get("pod") == "infer-0" and s)
        assert later["0"].get("pod", "") == ""
        assert len(later) == 2  # the old label set is gone, not left beside the new one
    finally:
        agent.terminate()
        err = agent.communicate(timeout=120)[1]
    assert fake.calls >= 2, err
