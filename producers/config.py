"""The node agent's config section (``agent:``) and what the agent's commands read."""

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
