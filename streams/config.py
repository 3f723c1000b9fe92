"""The stream engine's config section (``engine:``)."""

from __future__ import annotations

from pathlib import Path

from gpuwarden.config import Section
from gpuwarden.units import Duration


class EngineConfig(Section):
    rules: Path | None = None
    observation_period: Duration = 14 * 86400
    allowed_lateness: Duration = 30.0
