"""DingTalk custom robot: markdown or actionCard with @-mobiles, optionally signed.

Signature (DingTalk docs): ``timestamp`` in milliseconds, ``sign`` =
urlencode(base64(HMAC-SHA256(key = secret, message = timestamp + "\\n" + secret))),
both in the query string. Success is ``errcode == 0``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from urllib.parse import quote_plus

from gpuwarden.contract import Tier
from gpuwarden.notifiers.http_channel import HttpChannel
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import DingTalkConfig
from gpuwarden.notifiers.markup import DINGTALK, dingtalk_mention, is_dingtalk_mobile
from gpuwarden.notifiers.render import Locale, is_resolved, render_text, render_title, top_tier, truncate_utf8
from gpuwarden.notifiers.verdict import HttpRequest, Verdict, body_code_verdict, json_request, reveal

TEXT_LIMIT = 18_000  # markdown size limit is not documented officially; stay well under 20 KB
RATE_LIMITED, SECURITY_CHECK_FAILED, NO_TOKEN = 130101, 310000, 300001
RATE_LIMIT_WAIT_S = 60.0


def sign(timestamp_ms: int, secret: str) -> str:
    """The URL-encoded ``sign`` query value."""
    mac = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(mac).decode())


def payload(cfg: DingTalkConfig, n: Notification, locale: Locale) -> dict:
    title = render_title(n, locale)  # the plain-text preview; the markdown text has its own, escaped
    heading, body = render_text(n, locale, DINGTALK)
    mobiles = list(dict.fromkeys(m for m in [*cfg.at_mobiles, *n.mentions] if is_dingtalk_mobile(m)))
    at_all = cfg.at_all_on_critical and top_tier(n) == Tier.CRITICAL and not is_resolved(n)
    # DingTalk only notifies mobiles that also appear as "@mobile" in the text: DINGTALK writes the on-call's
    # in the body, the receiver's own go at the end.
    tail = " ".join(dingtalk_mention(m) for m in cfg.at_mobiles)
    text = truncate_utf8(f"### {heading}\n\n{body}", TEXT_LIMIT) + (f"\n\n{tail}" if tail else "")
    at = {"atMobiles": mobiles, "atUserIds": cfg.at_user_ids, "isAtAll": at_all}
    if cfg.msgtype == "actionCard":
        view = "View" if locale.language == "en" else "查看"
        card = {"title": title, "text": text, "singleTitle": view, "singleURL": cfg.action_url}
        return {"msgtype": "actionCard", "actionCard": card, "at": at}
    return {"msgtype": "markdown", "markdown": {"title": title, "text": text}, "at": at}


def build_request(cfg: DingTalkConfig, n: Notification, locale: Locale, now: float) -> HttpRequest:
    url = reveal(cfg.url)
    if cfg.secret is not None:
        ts = int(now * 1000)
        url += f"{'&' if '?' in url else '?'}timestamp={ts}&sign={sign(ts, reveal(cfg.secret))}"
    return json_request(url, payload(cfg, n, locale))


def classify(status: int, headers: object, body: bytes) -> Verdict:
    """errcode 0 ok; 130101 rate limit (retry); 310000 security check failed, 300001 no such token:
    permanent, refused credentials."""
    return body_code_verdict(status, headers, body, platform="DingTalk", code_keys=("errcode",),
                             msg_keys=("errmsg",), retry={RATE_LIMITED: RATE_LIMIT_WAIT_S},
                             auth=(SECURITY_CHECK_FAILED, NO_TOKEN))


CHANNEL = HttpChannel(build_request, classify, limits=((20, 60.0),), text_limit=TEXT_LIMIT)  # 20/min per robot
