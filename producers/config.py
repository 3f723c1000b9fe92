"""The node agent's config section (``agent:``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuwarden.config import Section
from gpuwarden.units import Duration


class AgentConfig(Section):
    node: str | None = Field(default=None, description="node name; the host name when unset")
    source: Literal["auto", "nvml", "simulate"] = "auto"
    fast_interval: Duration = 1.0
    slow_interval: Duration = 15.0
