"""WeCom (企业微信) group robot: markdown within the 4096-byte limit."""

from __future__ import annotations

from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import WeComConfig
from gpuwarden.notifiers.markup import WECOM, wecom_mention
from gpuwarden.notifiers.render import Locale, render_text, truncate_utf8
from gpuwarden.notifiers.verdict import HttpRequest, Verdict, body_code_verdict, json_request, reveal

MARKDOWN_BYTES = 4096
RATE_LIMITED, BAD_KEY = 45009, 93000
RATE_LIMIT_WAIT_S = 60.0


def content(cfg: WeComConfig, n: Notification, locale: Locale) -> str:
    """Markdown content cut on a UTF-8 boundary so it never exceeds 4096 bytes; the on-call's ``<@userid>`` in
    the body (written by WECOM), the receiver's own at the end."""
    title, body = render_text(n, locale, WECOM)
    mentions = "".join(wecom_mention(u) for u in cfg.mention_user_ids)
    tail = f"\n{mentions}" if mentions else ""
    room = MARKDOWN_BYTES - len(tail.encode())
    return truncate_utf8(f"## {title}\n{body}", room) + tail


def build_request(cfg: WeComConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    return json_request(reveal(cfg.url), {"msgtype": "markdown", "markdown": {"content": content(cfg, n, locale)}})


def classify(status: int, headers: object, body: bytes) -> Verdict:
    """errcode 0 ok; 45009 rate limit (retry); 93000 invalid webhook URL: permanent."""
    return body_code_verdict(status, headers, body, platform="WeCom", code_keys=("errcode",),
                             msg_keys=("errmsg",), retry={RATE_LIMITED: RATE_LIMIT_WAIT_S}, auth=(BAD_KEY,))


CHANNEL = HttpChannel(build_request, classify, limits=((20, 60.0),), text_limit=MARKDOWN_BYTES)  # 20/min per robot
