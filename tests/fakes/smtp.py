"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps what it receives."""

from __future__ import annotations

import email
import socket
from email.message import Message

from aiosmtpd.controller import Controller


class _Handler:
    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 (aiosmtpd hook name)
        self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
        self.messages.append(email.message_from_bytes(envelope.content))
        return "250 Message accepted for delivery"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeSmtp:
    def __init__(self) -> None:
        self.handler = _Handler()
        self.port = _free_port()
        self.controller = Controller(self.handler, hostname="127.0.0.1", port=self.port)

    @property
    def messages(self) -> list[Message]:
        return self.handler.messages

    def __enter__(self) -> FakeSmtp:
        self.controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()
