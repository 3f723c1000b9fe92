"""Keep secrets out of logs, exceptions and the delivery log.

Webhook URLs carry their token, signing secrets sign, routing keys page people:
every configured secret value is replaced by ``***`` wherever text leaves the
process, and so are URL query tokens we did not configure (``access_token=``,
``key=``, ``sign=``…) and Slack hook paths.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable

MASK = "***"
_QUERY_TOKEN = re.compile(r"(?i)([?&](?:access_token|token|key|sign|secret|signature|api_key|apikey)=)[^&\s\"'#]+")
_SLACK_HOOK = re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[^\s\"'?#]+")
_FEISHU_HOOK = re.compile(r"(/open-apis/bot/v2/hook/)[^\s\"'?#]+")
#: Secrets shorter than this are not masked on their own (a 2-letter value would mask half the log).
MIN_SECRET_LEN = 4

# Loggers whose records can carry a request URL.
LOGGERS = ("httpx", "httpcore", "gpuwarden.notifiers", "gpuwarden.notifiers.delivery", "asyncio")


class Redactor:
    """Replaces known secret values and URL tokens; thread-safe, values only ever added."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        from urllib.parse import quote, quote_plus

        with self._lock:
            new = {v for s in secrets if s and len(s) >= MIN_SECRET_LEN
                   for v in (s, quote(s, safe=""), quote_plus(s))} - self._secrets
            if not new:
                return  # known already: every request reveals its secrets, so this is the common case
            self._secrets |= new
            ordered = sorted(self._secrets, key=len, reverse=True)
            self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def __call__(self, text: str) -> str:
        if self._pattern is not None:
            text = self._pattern.sub(MASK, text)
        text = _QUERY_TOKEN.sub(lambda m: m.group(1) + MASK, text)
        text = _SLACK_HOOK.sub(lambda m: m.group(1) + MASK, text)
        return _FEISHU_HOOK.sub(lambda m: m.group(1) + MASK, text)


REDACTOR = Redactor()


def redact(text: str) -> str:
    """Mask every registered secret and URL token in ``text``."""
    return REDACTOR(text)


class RedactingFilter(logging.Filter):
    """Rewrites a record's message (and traceback text) through the redactor before any handler sees it."""

    def __init__(self, redactor: Redactor = REDACTOR) -> None:
        super().__init__()
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self.redactor(record.getMessage())
        record.args = None
        if record.exc_info:
            record.exc_text = self.redactor(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True


_FILTER = RedactingFilter()


def install(secrets: Iterable[str] = (), loggers: Iterable[str] = LOGGERS) -> None:
    """Register secret values and put the filter on the loggers that may see them (idempotent)."""
    REDACTOR.add(secrets)
    for name in loggers:
        lg = logging.getLogger(name)
        if _FILTER not in lg.filters:
            lg.addFilter(_FILTER)
