"""Slack incoming webhook: Block Kit (at most 50 blocks) with a plain-text fallback.

Data is never mrkdwn here: the blocks carry it in ``plain_text`` and ``rich_text`` elements, which
Slack shows as they are (its rich text block is meant for "user-defined formatted text"), and the
fallback ``text`` goes with ``mrkdwn: false``, so only ``&<>`` are escaped, as entities Slack decodes.
The configured on-call (a member ``U…`` or user group ``S…``) is a ``user``/``usergroup`` element in
the blocks and ``<@U…>``/``<!subteam^S…>`` in the fallback: the only mentions a message holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import SlackConfig
from gpuwarden.notifiers.markup import PLAIN, SLACK, Line, rich_text
from gpuwarden.notifiers.render import (DETAILED_ALERTS, Locale, block_parts, intro_parts, line_parts, render_text,
                                        render_title, truncate_utf8)
from gpuwarden.notifiers.verdict import HttpRequest, Ok, Permanent, Verdict, http_status_verdict, json_request, reveal

TEXT_LIMIT = 30_000
MAX_BLOCKS = 50
BLOCK_CHARS = 3000  # a section's text limit, kept for each rich text block
HEADER_CHARS = 150
MORE = "\n…"  # where the fallback is cut


def _capped(objects: list[dict], limit: int) -> list[dict]:
    """The rich text objects cut to at most ``limit`` characters of text in all (a section's limit, kept
    for rich text too; a mention element has no text); what is cut is in the text fallback."""
    out: list[dict] = []
    for obj in objects:
        kept = []
        for el in obj["elements"]:
            if limit <= 0:
                break
            if "text" in el:
                el = {**el, "text": el["text"][:limit]}
                limit -= len(el["text"])
            kept.append(el)
        if kept:
            out.append({**obj, "elements": kept})
    return out


def _rich(lines: Sequence[Line]) -> dict:
    return {"type": "rich_text", "elements": _capped(rich_text(lines), BLOCK_CHARS)}


def blocks(n: Notification, locale: Locale) -> list[dict]:
    """Header (plain text), intro, one rich text block per detailed alert, the rest as blocks of lines: data
    only ever in plain text or rich text elements, never in mrkdwn. Never over 50 blocks."""
    out: list[dict] = [{"type": "header", "text": {"type": "plain_text", "text": render_title(n, locale)[:HEADER_CHARS]}},
                       _rich(intro_parts(n, locale))]
    out += [_rich(block_parts(a, locale)) for a in n.alerts[:DETAILED_ALERTS]]
    chunk: list[Line] = []
    size = 0
    for a in n.alerts[DETAILED_ALERTS:]:
        line = line_parts(a, locale)
        chars = len(PLAIN.line(line)) + 1
        if chunk and size + chars > BLOCK_CHARS:
            out.append(_rich(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += chars
    if chunk:
        out.append(_rich(chunk))
    if len(out) > MAX_BLOCKS:
        dropped = len(out) - (MAX_BLOCKS - 1)
        out = out[: MAX_BLOCKS - 1] + [{"type": "context", "elements": [
            {"type": "plain_text", "text": f"+{dropped} sections in the text fallback"}]}]
    return out


def fallback(n: Notification, locale: Locale) -> str:
    """Title and body, escaped for Slack's text with ``mrkdwn`` off, within TEXT_LIMIT bytes and never
    ending in half an entity (``&amp;`` cut to ``&am`` would show)."""
    title, body = render_text(n, locale, SLACK)
    text = f"{title}\n{body}"
    cut = truncate_utf8(text, TEXT_LIMIT, MORE)
    if cut == text:
        return text
    head = cut.removesuffix(MORE)
    amp = head.rfind("&")
    return (head[:amp] if amp != -1 and ";" not in head[amp:] else head) + MORE


def build_request(cfg: SlackConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    payload = {"text": fallback(n, locale), "mrkdwn": False, "blocks": blocks(n, locale)}
    return json_request(reveal(cfg.url), payload)


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
