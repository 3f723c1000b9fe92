"""The producers' config sections (``agent:``, ``scheduler:``) and what their commands read."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol

from pydantic import Field

from gpuwarden.config import CommonSettings, Section
from gpuwarden.units import Duration


class AgentConfig(Section):
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
    metrics_port: int | None = Field(default=None, ge=1, le=65535, description="Prometheus /metrics; off when unset")
    metrics_bind: str = "127.0.0.1"
    publish_timeout: Duration = 10.0


class AgentSettings(CommonSettings, Protocol):
    agent: AgentConfig


class SchedulerConfig(Section):
    """``scheduler:``, read by ``gpuwarden scheduler`` (one collector per cluster)."""

    cluster: str = Field(default="default", min_length=1, description="the cluster's name: the records' key")
    interval: Duration = Field(default=30.0, gt=0, description="wall time between polls")
    max_backoff: Duration = Field(default=300.0, gt=0, description="longest wait between polls while failing")
    command_timeout: Duration = Field(default=30.0, gt=0, description="one squeue/sinfo call or API list")
    kubeconfig: Path | None = Field(default=None, description="Kubernetes: in-cluster config, else the default kubeconfig, when unset")


class SchedulerSettings(CommonSettings, Protocol):
    scheduler: SchedulerConfig
    agent: AgentConfig
