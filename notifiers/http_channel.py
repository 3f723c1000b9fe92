"""A channel that is one HTTP POST: a pure request builder and a pure answer classifier.

The webhook platforms (and Alertmanager's API) differ only in those two functions and their limits;
the POST itself, and what a timeout or a connection error means, is here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import httpx

from gpuwarden.notifiers.channel import C, Channel, RateLimit, SendContext
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.redact import redact
from gpuwarden.notifiers.render import Locale
from gpuwarden.notifiers.verdict import HttpRequest, Retry, Verdict

#: ``(cfg, notification, locale, wall time now) -> request``: pure (the time signs it).
BuildRequest = Callable[[C, Notification, Locale, float], HttpRequest]
#: ``(status, headers, body) -> verdict``: pure.
Classify = Callable[[int, object, bytes], Verdict]


@dataclass(frozen=True, slots=True)
class HttpChannel(Channel[C]):
    build_request: BuildRequest[C]
    classify: Classify
    limits: tuple[RateLimit, ...]
    text_limit: int
    one_alert_per_request: bool = False
    sends_ack: bool = False
    opens_incidents: bool = False

    def rate_limits(self, cfg: C) -> list[RateLimit]:
        return list(self.limits)

    async def send(self, cfg: C, n: Notification, locale: Locale, ctx: SendContext) -> Verdict:
        req = self.build_request(cfg, n, locale, ctx.clock())
        try:
            resp = await ctx.client.post(req.url, content=req.body, headers=req.headers)
        except httpx.TimeoutException as e:
            return Retry(None, f"timeout ({type(e).__name__})")
        except httpx.HTTPError as e:  # the URL (with its token) may be in the message: redact
            return Retry(None, redact(f"{type(e).__name__}: {e}"))
        return self.classify(resp.status_code, resp.headers, resp.content)
