"""Apprise: any of the ~100 services Apprise knows, through its (synchronous) ``notify``.

Optional: ``pip install 'gpuwarden[apprise]'``. Apprise is imported when a
receiver needs it, so a build without the extra runs every other channel and
refuses an apprise receiver at start with the command that fixes it.

Apprise only says True or False, so False is a :class:`Retry`: delivery's
backoff, spool and fallback then apply as for a 5xx. Each send uses a fresh
``Apprise`` object, so Apprise's own per-object throttle (a real ``time.sleep``
of seconds between sends) never fires; our limiter on the injected clock
paces the sends instead.

The body is declared plain text (``body_format=text``), written by :data:`~gpuwarden.notifiers.markup.APPRISE`:
Apprise then escapes it for the target's own format (apprise ``conversion/format.py``:
``text_to_markdown``, ``text_to_html``; its Slack plugin escapes ``&<>``), so data never turns into
markup on a Markdown or HTML service.
"""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType
from urllib.parse import unquote, urlsplit

from gpuwarden.contract import Tier
from gpuwarden.notifiers.channel import Channel, RateLimit, SendContext
from gpuwarden.notifiers.markup import APPRISE
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import AppriseConfig
from gpuwarden.notifiers.render import Locale, is_resolved, render_text, top_tier, truncate_utf8
from gpuwarden.notifiers.verdict import Ok, Retry, Verdict, reveal

INSTALL_HINT = "pip install 'gpuwarden[apprise]'"
#: The oldest Apprise whose Markdown targets get a plain-text body escaped (pyproject's extra): 1.7.0 to
#: 1.13.1 send it as it is, and ``[t](url)`` from data is a link (tests/notifiers/test_markup_injection.py).
MIN_MAJOR = 2
#: Loggers that see apprise URLs: apprise's own and urllib3's request line (under requests).
LOGGERS = ("apprise", "urllib3.connectionpool")
#: Digests stay under what most chat targets take (Telegram 4096, Discord 2000 is split by Apprise).
TEXT_LIMIT = 4000


def _token_like(part: str) -> bool:
    """Hook ids and bot tokens: long, or mid-length with digits; path words like ``api`` are not."""
    return len(part) >= 16 or (len(part) >= 8 and any(c.isdigit() for c in part))


def _apprise() -> ModuleType:
    return importlib.import_module("apprise")


def url_secrets(cfg: AppriseConfig) -> list[str]:
    """Token-like pieces of the URL, which Apprise and urllib3 log apart from the whole URL."""
    parts = urlsplit(reveal(cfg.url))
    pieces = [parts.username or "", *parts.path.split("/")]
    pieces += [v for kv in parts.query.split("&") for v in kv.split("=", 1)[1:]]
    host = parts.netloc.rpartition("@")[2]  # case kept (``hostname`` lowercases)
    if "." not in host and host.split(":")[0] != "localhost":  # tgram://{bot_token}/…: the "host" is a token
        pieces += [host, *host.split(":")]
    return [unquote(p) for p in pieces if _token_like(p)] + ([unquote(parts.password)] if parts.password else [])


def notify_type(n: Notification) -> str:
    if is_resolved(n):
        return "success"
    return {Tier.CRITICAL: "failure", Tier.ATTENTION: "warning"}.get(top_tier(n), "info")


def _notify_blocking(url: str, title: str, body: str, kind: str, timeout_s: float) -> bool:
    lib = _apprise()
    ap = lib.Apprise()
    if not ap.add(url):
        return False
    for service in ap:  # never wait on one socket longer than delivery waits for the whole send
        service.socket_connect_timeout = min(service.socket_connect_timeout, timeout_s)
        service.socket_read_timeout = min(service.socket_read_timeout, timeout_s)
    return bool(ap.notify(body=body, title=title, notify_type=kind, body_format=lib.NotifyFormat.TEXT))


class AppriseChannel(Channel[AppriseConfig]):
    """Any Apprise URL: limits configured per receiver, the URL's pieces redacted, the extra checked at start."""

    text_limit = TEXT_LIMIT
    loggers = LOGGERS

    def rate_limits(self, cfg: AppriseConfig) -> list[RateLimit]:
        """Configured: the target can be anything, so the default (20/min) is conservative."""
        return [(cfg.rate_limit, cfg.rate_window)]

    def secrets(self, cfg: AppriseConfig) -> list[str]:
        """The URL, and its token-like pieces, which Apprise and urllib3 log apart from the whole URL."""
        return super().secrets(cfg) + url_secrets(cfg)

    def problems(self, receivers: list[tuple[str, AppriseConfig]]) -> list[str]:
        """Why these receivers cannot run here: the extra is missing or too old, or Apprise rejects the URL."""
        if not receivers:
            return []
        names = ", ".join(name for name, _ in receivers)
        try:
            lib = _apprise()
        except ImportError:
            return [f"receivers {names}: the apprise channel needs the apprise extra ({INSTALL_HINT})"]
        if int(lib.__version__.split(".")[0]) < MIN_MAJOR:
            return [f"receivers {names}: the apprise channel needs apprise {MIN_MAJOR}.0 or later, found "
                    f"{lib.__version__}, which sends data unescaped to Markdown targets ({INSTALL_HINT})"]
        return [f"receivers {name}: apprise does not accept the URL in {cfg.url.env or cfg.url.file} "
                "(unknown schema or malformed)"
                for name, cfg in receivers if not lib.Apprise().add(reveal(cfg.url))]

    async def send(self, cfg: AppriseConfig, n: Notification, locale: Locale, ctx: SendContext) -> Verdict:
        """Rendered title and plain-text body to the Apprise URL, in a worker thread, within ``ctx.timeout_s``."""
        title, body = render_text(n, locale, APPRISE)
        timeout_s = ctx.timeout_s
        call = asyncio.to_thread(_notify_blocking, reveal(cfg.url), title, truncate_utf8(body, TEXT_LIMIT),
                                 notify_type(n), timeout_s)
        try:
            ok = await asyncio.wait_for(call, timeout_s)
        except TimeoutError:
            return Retry(None, f"apprise: no answer within {timeout_s:g}s")
        return Ok() if ok else Retry(None, "apprise: notification not accepted (the apprise log says why)")


CHANNEL = AppriseChannel()
