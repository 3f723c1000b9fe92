"""Delivery knows a platform only through the Channel interface: a channel it has never seen works."""

from __future__ import annotations

import ast
from importlib import resources
from zoneinfo import ZoneInfo

import pytest

from gpuwarden.notifiers import delivery
from gpuwarden.notifiers.channel import Channel, RateLimit, SendContext
from gpuwarden.notifiers.delivery import CHANNELS, Delivery
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import CHANNELS as SECTIONS, Receiver, WebhookConfig
from gpuwarden.notifiers.redact import redact
from gpuwarden.notifiers.render import Locale
from gpuwarden.notifiers.verdict import Ok, Verdict
from tests.fakes.alerts import note

SECRET = "s3cr3t-only-the-channel-knows"


class Recording(Channel[WebhookConfig]):
    """A channel delivery has no code for: it records what it is asked to send."""

    text_limit = 10_000

    def __init__(self, problems: list[str] | None = None) -> None:
        self.sent: list[tuple[str, Locale]] = []
        self._problems = problems or []

    def rate_limits(self, cfg: WebhookConfig) -> list[RateLimit]:
        return [(1, 60.0)]

    def secrets(self, cfg: WebhookConfig) -> list[str]:
        return [SECRET]

    def problems(self, receivers: list[tuple[str, WebhookConfig]]) -> list[str]:
        return [f"{name}: {p}" for name, _ in receivers for p in self._problems]

    async def send(self, cfg: WebhookConfig, n: Notification, locale: Locale, ctx: SendContext) -> Verdict:
        self.sent.append((n.id, locale))
        return Ok()


def test_every_receiver_section_has_a_channel() -> None:
    assert set(CHANNELS) == set(SECTIONS)
    assert all(isinstance(c, Channel) for c in CHANNELS.values())


async def test_delivery_takes_limits_secrets_and_sending_from_the_channel(monkeypatch, clock, spool) -> None:
    channel = Recording()
    monkeypatch.setitem(delivery.CHANNELS, "webhook", channel)
    r = Receiver(name="rec", webhook={"url": {"env": "UNSET_AND_UNREAD"}})
    d = Delivery([r], spool=spool, language="zh-CN", timezone="Asia/Shanghai", clock=clock, sleep=clock.sleep)
    try:
        first, second = await d.deliver(note("rec", 1)), await d.deliver(note("rec", 2))
    finally:
        await d.aclose()
    assert (first.status, second.status) == ("delivered", "spooled")  # its 1/min limit holds the second
    assert channel.sent == [("n1", Locale("zh-CN", ZoneInfo("Asia/Shanghai")))]
    assert redact(f"token {SECRET}") == "token ***"


def test_a_channel_refuses_its_receivers_at_start(monkeypatch) -> None:
    monkeypatch.setitem(delivery.CHANNELS, "webhook", Recording(problems=["not installed here"]))
    with pytest.raises(ValueError, match="rec: not installed here"):
        Delivery([Receiver(name="rec", webhook={"url": {"env": "UNSET_AND_UNREAD"}})], spool=None)


def imports(source: str) -> set[str]:
    """The gpuwarden names a file imports, lazy imports included (``from pkg import mod`` names ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in found if m.startswith("gpuwarden.")}


def test_the_notifiers_import_only_the_foundation_and_no_circle() -> None:
    room = resources.files("gpuwarden.notifiers")
    graph = {f"gpuwarden.notifiers.{f.name.removesuffix('.py')}": imports(f.read_text())
             for f in room.iterdir() if f.name.endswith(".py")}
    assert {m for deps in graph.values() for m in deps if m.split(".")[1] in ("producers", "streams")} == set()
    inside = {m: deps & graph.keys() for m, deps in graph.items()}

    def circle_through(start: str) -> bool:
        todo, seen = list(inside[start]), set()
        while todo:
            m = todo.pop()
            if m == start:
                return True
            if m not in seen:
                seen.add(m)
                todo += inside[m]
        return False

    assert [m for m in inside if circle_through(m)] == []
