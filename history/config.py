"""The history room's config section (``accounting:``) and what its commands read."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field

from gpuwarden.config import CommonSettings, Section

By = Literal["user", "project", "task-class"]


class AccountingConfig(Section):
    """``accounting:`` section: idle threshold, price, and the weekly digest's receiver."""

    idle_util_below: float = Field(default=5.0, ge=0, le=100)
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    currency: str = ""
    digest_receiver: str | None = None
    digest_by: By = "user"


class HistorySettings(CommonSettings, Protocol):
    accounting: AccountingConfig
