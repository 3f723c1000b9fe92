"""The notifier's config section (``notify:``)."""

from __future__ import annotations

from typing import Literal

from gpuwarden.config import Section


class NotifyConfig(Section):
    language: Literal["en", "zh-CN"] | None = None
