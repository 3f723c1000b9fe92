"""Slack incoming webhook: Block Kit (at most 50 blocks) with a plain-text fallback."""

from __future__ import annotations

from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import SlackConfig
from gpuwarden.notifiers.markup import SLACK
from gpuwarden.notifiers.render import (DETAILED_ALERTS, Locale, alert_block, alert_line, render_text, render_title,
                                        truncate_utf8)
from gpuwarden.notifiers.verdict import HttpRequest, Ok, Permanent, Verdict, http_status_verdict, json_request, reveal

TEXT_LIMIT = 30_000
MAX_BLOCKS = 50
SECTION_CHARS = 3000  # a section block's text limit
HEADER_CHARS = 150


def _cut(text: str, limit: int) -> str:
    """At most ``limit`` characters, never half an entity (``&amp;`` cut to ``&am`` would show)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    amp = cut.rfind("&")
    return cut[:amp] if amp != -1 and ";" not in cut[amp:] else cut


def _section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": _cut(text, SECTION_CHARS)}}


def blocks(n: Notification, locale: Locale) -> list[dict]:
    """Header (plain text), intro, one section per detailed alert, the rest as line sections (mrkdwn, data
    escaped): never over 50 blocks."""
    _, body = render_text(n, locale, SLACK)
    intro = body.split("\n\n", 1)[0]
    out: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": render_title(n, locale)[:HEADER_CHARS]}},
                       _section(intro)]
    out += [_section(alert_block(a, locale, SLACK)) for a in n.alerts[:DETAILED_ALERTS]]
    chunk = ""
    for a in n.alerts[DETAILED_ALERTS:]:
        line = alert_line(a, locale, SLACK)
        if len(chunk) + len(line) + 1 > SECTION_CHARS:
            out.append(_section(chunk))
            chunk = ""
        chunk += line + "\n"
    if chunk:
        out.append(_section(chunk))
    if len(out) > MAX_BLOCKS:
        dropped = len(out) - (MAX_BLOCKS - 1)
        out = out[: MAX_BLOCKS - 1] + [{"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"+{dropped} sections in the text fallback"}]}]
    return out


def build_request(cfg: SlackConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    title, body = render_text(n, locale, SLACK)
    text = truncate_utf8(f"{title}\n{body}", TEXT_LIMIT)
    return json_request(reveal(cfg.url), {"text": text, "blocks": blocks(n, locale)})


def classify(status: int, headers: object, body: bytes) -> Verdict:
    """200 ``ok``; 429 with Retry-After; errors are plain text (``invalid_payload``, ``no_text``…);
    403 ``invalid_token`` and 404 ``no_service`` (the hook URL is the token) refuse the credentials."""
    text = body.decode("utf-8", "replace").strip()
    if status in (403, 404):
        return Permanent(f"HTTP {status}: {text[:300]}", auth=True, reason=f"{text[:100]} (HTTP {status})")
    if (v := http_status_verdict(status, headers, body)) is not None:
        return v
    return Ok() if status == 200 and text in ("ok", "") else Permanent(f"HTTP {status}: {text[:300]}")


CHANNEL = HttpChannel(build_request, classify, limits=((1, 1.0),), text_limit=TEXT_LIMIT)  # 1 message/s per webhook
