"""Email over SMTP: the message is built purely; smtplib runs in a worker thread."""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from gpuwarden.notifiers.channel import Channel, RateLimit, SendContext
from gpuwarden.notifiers.markup import HTML
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import EmailConfig
from gpuwarden.notifiers.render import Locale, render_text, render_title
from gpuwarden.notifiers.verdict import Ok, Permanent, Retry, Verdict, reveal


def build_message(cfg: EmailConfig, n: Notification, locale: Locale, now: float) -> EmailMessage:
    """A plain-text part and an HTML alternative whose data is HTML-escaped (``html.escape``)."""
    _, body = render_text(n, locale)
    heading, body_html = render_text(n, locale, HTML)
    msg = EmailMessage()
    msg["Subject"] = render_title(n, locale)
    msg["From"] = cfg.sender
    msg["To"] = ", ".join(cfg.to)
    msg["Date"] = formatdate(now, usegmt=True)
    msg["Message-ID"] = make_msgid(idstring=n.id or None, domain="gpuwarden")
    msg["X-Gpuwarden-Group"] = n.group_key
    msg.set_content(body)
    msg.add_alternative(f"<html><body><h3>{heading}</h3>\n<p>{body_html}</p></body></html>\n", subtype="html")
    return msg


def _send_blocking(cfg: EmailConfig, msg: EmailMessage) -> Verdict:
    try:
        if cfg.tls == "ssl":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(cfg.host, cfg.port, timeout=cfg.timeout_s,
                                                  context=ssl.create_default_context())
        else:
            smtp = smtplib.SMTP(cfg.host, cfg.port, timeout=cfg.timeout_s)
        with smtp:
            if cfg.tls == "starttls":
                smtp.starttls(context=ssl.create_default_context())
            if cfg.username and cfg.password:
                smtp.login(cfg.username, reveal(cfg.password))
            refused = smtp.send_message(msg)
        if refused:
            return Permanent(f"SMTP refused recipients: {', '.join(sorted(refused))}")
        return Ok()
    except smtplib.SMTPRecipientsRefused as e:
        return Permanent(f"SMTP refused recipients: {', '.join(sorted(e.recipients))}")
    except smtplib.SMTPResponseException as e:
        text = e.smtp_error.decode("utf-8", "replace") if isinstance(e.smtp_error, bytes) else str(e.smtp_error)
        if 400 <= e.smtp_code < 500:
            return Retry(None, f"SMTP {e.smtp_code}: {text}")
        return Permanent(f"SMTP {e.smtp_code}: {text}", auth=e.smtp_code == 535,  # 535: credentials refused
                         reason=f"{text} ({e.smtp_code})")
    except (OSError, smtplib.SMTPException) as e:
        return Retry(None, f"SMTP {cfg.host}:{cfg.port} unreachable: {type(e).__name__}: {e}")


class EmailChannel(Channel[EmailConfig]):
    """SMTP has no platform limit; ``cfg.timeout_s`` bounds each connection."""

    text_limit = 1_000_000

    def rate_limits(self, cfg: EmailConfig) -> list[RateLimit]:
        return []

    async def send(self, cfg: EmailConfig, n: Notification, locale: Locale, ctx: SendContext) -> Verdict:
        return await asyncio.to_thread(_send_blocking, cfg, build_message(cfg, n, locale, ctx.clock()))


CHANNEL = EmailChannel()
