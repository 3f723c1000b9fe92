"""Feishu/Lark custom bot: an interactive card, optionally signed.

Signature (Feishu docs): ``timestamp`` in seconds and ``sign`` =
base64(HMAC-SHA256(key = timestamp + "\\n" + secret, message = empty)), both in the
body. HTTP says 200 even on failure: only ``code == 0`` is success.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from gpuwarden.contract import Tier
from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import FeishuConfig
from gpuwarden.notifiers.markup import TEXT, feishu_mention
from gpuwarden.notifiers.render import Locale, is_resolved, render_text, render_title, top_tier, truncate_utf8
from gpuwarden.notifiers.verdict import HttpRequest, Verdict, body_code_verdict, json_request, reveal

TEXT_LIMIT = 18_000  # the body must stay under 20 KB
RATE_LIMITED, BAD_SIGNATURE, BAD_REQUEST = 11232, 19021, 9499

_TEMPLATE = {Tier.CRITICAL: "red", Tier.ATTENTION: "orange", Tier.INFO: "blue"}


def sign(timestamp: int, secret: str) -> str:
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def card(cfg: FeishuConfig, n: Notification, locale: Locale) -> dict:
    """Title and body as ``plain_text`` (Feishu renders no markup there: data shows as it is); the
    configured mentions, and only they, in a ``lark_md`` div of their own."""
    _, body = render_text(n, locale, TEXT)
    ats = [a for a in map(feishu_mention, [*cfg.at_user_ids, *n.mentions]) if a]
    if cfg.at_all_on_critical and top_tier(n) == Tier.CRITICAL and not is_resolved(n):
        ats.append("<at id=all></at>")
    mention = " ".join(ats)
    elements = [{"tag": "div", "text": {"tag": "plain_text", "content": truncate_utf8(body, TEXT_LIMIT - len(mention))}}]
    if mention:
        elements.append({"tag": "div", "text": {"tag": "lark_md", "content": mention}})
    return {
        "config": {"wide_screen_mode": True},
        "header": {"title": {"tag": "plain_text", "content": render_title(n, locale)},
                   "template": "green" if is_resolved(n) else _TEMPLATE[top_tier(n)]},
        "elements": elements,
    }


def build_request(cfg: FeishuConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    payload: dict = {"msg_type": "interactive", "card": card(cfg, n, locale)}
    if cfg.secret is not None:
        ts = int(now)
        payload = {"timestamp": str(ts), "sign": sign(ts, reveal(cfg.secret)), **payload}
    return json_request(reveal(cfg.url), payload)


def classify(status: int, headers: object, body: bytes) -> Verdict:
    """code 0 ok; 11232 rate limit (retry); 19021 bad signature, 9499 bad request: permanent."""
    return body_code_verdict(status, headers, body, platform="Feishu", code_keys=("code", "StatusCode"),
                             msg_keys=("msg", "StatusMessage"), retry={RATE_LIMITED: None}, auth=(BAD_SIGNATURE,))


CHANNEL = HttpChannel(build_request, classify, limits=((5, 1.0), (100, 60.0)), text_limit=TEXT_LIMIT)  # per bot
