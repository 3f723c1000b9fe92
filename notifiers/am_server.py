"""The HTTP edge for Alertmanager's webhook: auth, a body limit, 400 with the reason, then the sink.

A Starlette app served by uvicorn inside the notifier's own event loop (no
thread, no second process), so accepted alerts go straight into the same
:class:`~gpuwarden.notifiers.pipeline.Notifier` as Kafka's. Everything about
the payload is decided in :mod:`gpuwarden.notifiers.am_ingest`; this module
only speaks HTTP. The routes are a list so a later console can mount them in
its own app.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from gpuwarden.contract import AlertTransition
from gpuwarden.notifiers.am_ingest import PayloadError, parse, transitions
from gpuwarden.notifiers.channel import secret_values
from gpuwarden.notifiers.config import AlertmanagerWebhookConfig
from gpuwarden.notifiers.redact import install as install_redaction
from gpuwarden.notifiers.verdict import authorization

log = logging.getLogger("gpuwarden.notify.alertmanager")
WEBHOOK_PATH = "/alertmanager/webhook"
HEALTH_PATH = "/-/healthy"

#: Takes the accepted alerts (recorded in the spool and routed) before the answer goes back.
Sink = Callable[[list[AlertTransition]], Awaitable[None]]


def expected_authorization(cfg: AlertmanagerWebhookConfig) -> bytes | None:
    """The one ``Authorization`` value accepted (None: no auth, loopback only), resolved at start (a
    missing secret fails there); the secrets are registered for redaction."""
    install_redaction(secret_values(cfg), loggers=(log.name, "uvicorn.error"))
    header = authorization(cfg.token, cfg.basic_auth)
    return header.encode() if header is not None else None


def authorized(header: str | None, expected: bytes | None) -> bool:
    """Constant-time: how much of a wrong token matched does not show in the answer's timing."""
    if expected is None:
        return True
    return header is not None and hmac.compare_digest(header.encode(), expected)


class TooLarge(Exception):
    pass


class ListenError(OSError):
    """The webhook's address cannot be bound (taken, not local): said once at start, with the address."""


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused once it passes ``limit`` bytes (announced or streamed): never buffered beyond it."""
    announced = request.headers.get("content-length")
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise TooLarge
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLarge
    return bytes(body)


def routes(cfg: AlertmanagerWebhookConfig, sink: Sink) -> list[Route]:
    expected = expected_authorization(cfg)

    async def webhook(request: Request) -> Response:
        if not authorized(request.headers.get("authorization"), expected):
            scheme = "Basic" if cfg.basic_auth is not None else "Bearer"
            return PlainTextResponse("unauthorized\n", 401, headers={"WWW-Authenticate": f'{scheme} realm="gpuwarden"'})
        try:
            body = await read_body(request, cfg.max_body_bytes)
        except TooLarge:
            return PlainTextResponse(f"body over the limit of {cfg.max_body_bytes} bytes "
                                     "(notify.alertmanager_webhook.max_body_bytes)\n", 413)
        try:
            msg = parse(body)
            accepted = transitions(msg, cfg)
        except PayloadError as e:
            log.warning("alertmanager webhook: refused a payload: %s", e)
            return PlainTextResponse(f"not an Alertmanager version-4 webhook payload: {e}\n", 400)
        await sink(accepted)
        if msg.truncated_alerts:
            log.warning("alertmanager webhook: receiver %r left out %d alerts of group %s (its max_alerts): "
                        "they are not routed here; raise or remove max_alerts", msg.receiver, msg.truncated_alerts,
                        msg.group_key)
        log.info("alertmanager webhook: %d alerts accepted from receiver %r (group %s)",
                 len(accepted), msg.receiver, msg.group_key)
        return JSONResponse({"accepted": len(accepted), "skipped": len(msg.alerts) - len(accepted)})

    async def healthy(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    return [Route(WEBHOOK_PATH, webhook, methods=["POST"]), Route(HEALTH_PATH, healthy, methods=["GET"])]


def app(cfg: AlertmanagerWebhookConfig, sink: Sink) -> Starlette:
    return Starlette(routes=routes(cfg, sink))


class _Server(uvicorn.Server):
    """Stopped by the notifier's own stop event: the worker's signal handlers stay the worker's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(bind: str, port: int, section: str = "notify.alertmanager_webhook") -> socket.socket:
    """The listening socket, bound now so a taken port fails at start with the address (and the
    config ``section`` that names it) in the error."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as e:
        sock.close()
        raise ListenError(e.errno, f"cannot listen on {bind}:{port} ({section}): {e.strerror}") from None
    sock.listen(128)
    return sock


def webhook_url(sock: socket.socket) -> str:
    """Where Alertmanager should post, for the socket :func:`listen` bound (port 0 resolved)."""
    host, port = sock.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}{WEBHOOK_PATH}"


async def serve(sock: socket.socket, asgi: Starlette, stop: asyncio.Event, lifespan: bool = False) -> None:
    """Serve ``asgi`` on ``sock`` until ``stop`` is set (or the server fails, which raises here);
    ``lifespan``: run the app's startup and shutdown (the web console's Kafka reader)."""
    server = _Server(uvicorn.Config(asgi, log_level="warning", access_log=False, lifespan="on" if lifespan else "off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        server.should_exit = True
        await task
