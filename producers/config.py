"""The producers' config sections (``agent:``, ``scheduler:``) and what their commands read."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field

from gpuwarden.config import CommonSettings, MetricsEndpoint, Section
from gpuwarden.units import Duration


class InferenceTarget(Section):
    """One serving engine's Prometheus endpoint on this node."""

    url: str = Field(pattern=r"^https?://", description="its /metrics, e.g. http://127.0.0.1:8000/metrics")
    engine: Literal["vllm", "sglang", "tgi", "triton"]
    service: str = Field(min_length=1, description="the service it serves: the SLO's and the alerts' name")
    gpus: list[int] = Field(default_factory=list, description="GPU indices it serves on; else from its process")


class InferenceConfig(Section):
    """``agent.inference``: the serving engines the agent scrapes (wall-clock cadence)."""

    targets: list[InferenceTarget] = Field(default_factory=list)
    interval: Duration = Field(default=15.0, gt=0, description="wall time between two scrapes of a target")
    timeout: Duration = Field(default=2.0, gt=0, description="one scrape's HTTP request, connect to last byte")
    discover: bool = Field(default=False, description=(
        "also probe http://127.0.0.1:<port>/metrics on the ports that GPU processes and their ancestors "
        "listen on, once per process and port; off by default: a probe is an HTTP request to a port the "
        "agent was not told about (a torch.distributed store among them)"))
    refresh: Duration = Field(default=60.0, gt=0, description="wall time between two looks in /proc for the "
                              "serving processes (and discovery)")


class AgentConfig(MetricsEndpoint):
    node: str | None = Field(default=None, description="node name; the host name when unset")
    source: Literal["auto", "nvml", "simulate"] = "auto"
    fast_interval: Duration = 1.0
    slow_interval: Duration = 15.0
    socket_path: Path = Field(default=Path("/run/gpuwarden/agent.sock"),
                              description="task SDK socket (Unix datagram)")
    kmsg_path: Path = Path("/dev/kmsg")
    proc_root: Path = Path("/proc")
    nvml_events: bool = True
    event_dedup_window: Duration = 10.0
    publish_timeout: Duration = 10.0
    pod_resources_socket: Path = Field(default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
                                       description="the kubelet's pod-resources API: pod, namespace and container "
                                       "labels on /metrics when this socket exists (needs gpuwarden[kubelet])")
    pod_resources_refresh: Duration = 30.0
    inference: InferenceConfig = Field(default_factory=InferenceConfig)


class AgentSettings(CommonSettings, Protocol):
    agent: AgentConfig


class SchedulerConfig(MetricsEndpoint):
    """``scheduler:``, read by ``gpuwarden scheduler`` (one collector per cluster); ``metrics_port``
    serves the queue's series (:mod:`gpuwarden.producers.schedmetrics`)."""

    cluster: str = Field(default="default", min_length=1, description="the cluster's name: the records' key")
    interval: Duration = Field(default=30.0, gt=0, description="wall time between polls")
    max_backoff: Duration = Field(default=300.0, gt=0, description="longest wait between polls while failing")
    command_timeout: Duration = Field(default=30.0, gt=0, description="one squeue/sinfo call or API list")
    kubeconfig: Path | None = Field(default=None, description="Kubernetes: in-cluster config, else the default kubeconfig, when unset")


class SchedulerSettings(CommonSettings, Protocol):
    scheduler: SchedulerConfig
    agent: AgentConfig
