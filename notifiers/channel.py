"""The one interface delivery knows a platform by: send a notification, say what the answer means.

Every channel module (Slack, Feishu, DingTalk, WeCom, PagerDuty, webhook, Alertmanager,
email, Apprise) exposes ``CHANNEL``, an instance of :class:`Channel`. Delivery
holds queues, rate limits, backoff and fallbacks and asks the channel only
what is declared here, so a new platform is one module and one entry in
``delivery.CHANNELS``, never a branch in delivery.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx
from pydantic import BaseModel

from gpuwarden.config import SecretRef
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import ChannelConfig
from gpuwarden.notifiers.render import Locale
from gpuwarden.notifiers.verdict import Verdict, reveal

C = TypeVar("C", bound=ChannelConfig)

#: A platform limit: at most ``count`` sends in any ``window``-second span.
RateLimit = tuple[int, float]


@dataclass(frozen=True, slots=True)
class SendContext:
    """What a send may use of the outside world: delivery's HTTP client, the wall clock
    (signature timestamps, ``Date`` headers) and how long one send may take."""

    client: httpx.AsyncClient
    clock: Callable[[], float]
    timeout_s: float


class Channel(ABC, Generic[C]):
    """How one platform takes a notification; ``C`` is its receiver config section."""

    text_limit: int
    """A digest grows only while its rendered body stays within this many UTF-8 bytes."""
    one_alert_per_request: bool = False
    """Delivery sends each alert of a notification on its own (PagerDuty: one event per alert)."""
    sends_ack: bool = False
    """Reason ``ack`` has a message of its own here (PagerDuty ``acknowledge``); elsewhere it is skipped."""
    opens_incidents: bool = False
    """A trigger stays open until resolved, so ``test-notify`` resolves the one it opens."""
    loggers: tuple[str, ...] = ()
    """Loggers besides the notifier's own that may print this channel's secrets (redaction covers them)."""

    @abstractmethod
    def rate_limits(self, cfg: C) -> list[RateLimit]:
        """The platform's documented limits for one receiver (``[]``: none)."""

    @abstractmethod
    async def send(self, cfg: C, n: Notification, locale: Locale, ctx: SendContext) -> Verdict:
        """Deliver ``n`` once and classify the answer; never raises for what the platform says."""

    def secrets(self, cfg: C) -> list[str]:
        """Every secret value of ``cfg`` (nested sections too, e.g. ``basic_auth.password``), resolved now:
        a missing one fails at start, and redaction hides them."""
        return secret_values(cfg)

    def problems(self, receivers: list[tuple[str, C]]) -> list[str]:
        """Why these receivers (name, config) cannot run in this process; checked once at start."""
        return []


def secret_values(section: BaseModel) -> list[str]:
    """The resolved value of every :class:`SecretRef` in ``section`` and the sections it holds."""
    out: list[str] = []
    for name in type(section).model_fields:
        v = getattr(section, name)
        if isinstance(v, SecretRef):
            out.append(reveal(v))
        elif isinstance(v, BaseModel):
            out.extend(secret_values(v))
    return out
