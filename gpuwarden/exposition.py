"""Serving a worker's Prometheus registry on ``/metrics``: the agent, stream and notify workers share it.

A small HTTP server in a daemon thread: scrapes never wait on the worker's event loop, and
prometheus-client's metrics are safe to read from another thread. Besides ``/metrics`` it
answers ``/-/healthy`` (liveness: the process is serving, always 200) and ``/-/ready``
(readiness: the process does its job; 503 with the reason when its ``ready`` check says why not,
e.g. an agent whose records wait in the spool with nothing published for 30 s). Probes,
compose healthchecks and the systemd watchdog (:mod:`gpuwarden.watchdog`) ask ``/-/ready``.
prometheus-client's text format names every counter ``*_total``; dcgm-exporter's counters
(``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, ...) have no suffix, so a registry may name
counters whose ``HELP``/``TYPE`` lines keep their own name (``bare_counters``); in OpenMetrics,
where a counter's sample must end in ``_total``, they are typed ``unknown`` under their own name.

``/metrics`` is prometheus-client's exposition: the format the scraper's ``Accept`` asks for
(OpenMetrics or the 0.0.4 text), gzip when ``Accept-Encoding`` takes it, ``?name[]=`` to ask for
some families only; and never the ``*_created`` samples (one more series per counter, histogram
and summary that nothing here reads).
"""

from __future__ import annotations

import gzip
import logging
import threading
from urllib.parse import parse_qs
from collections.abc import Callable, Collection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.metrics_core import Metric

from gpuwarden import watchdog
from gpuwarden.config import MetricsEndpoint

log = logging.getLogger("gpuwarden")

#: A readiness check: None when the process does its job, else why not (one line, no secrets).
Readiness = Callable[[], "str | None"]


_CREATED_IN = ("counter", "histogram", "summary", "gaugehistogram")


class _Served:
    """``registry`` as served: no ``*_created`` samples; in OpenMetrics, ``bare`` counters ``unknown``."""

    def __init__(self, registry: object, bare: Collection[str], openmetrics: bool,
                 names: Collection[str] | None = None) -> None:
        self.registry, self.bare, self.openmetrics, self.names = registry, bare, openmetrics, names

    def collect(self) -> object:
        for family in self.registry.collect():  # type: ignore[attr-defined]
            if self.names is not None and family.name not in self.names \
                    and not any(x.name in self.names for x in family.samples):
                continue
            typ = "unknown" if self.openmetrics and family.name in self.bare else family.type
            out = Metric(family.name, family.documentation, typ, family.unit)
            out.samples = [x for x in family.samples
                           if not (family.type in _CREATED_IN and x.name.endswith("_created"))]
            yield out


def exposition(registry: CollectorRegistry, bare_counters: Collection[str] = (), accept: str | None = None,
               accept_encoding: str | None = None, query: str = "") -> tuple[bytes, dict[str, str]]:
    """``/metrics``' body and headers for a request's ``Accept``, ``Accept-Encoding`` and query."""
    encoder, content_type = choose_encoder(accept or "")
    names = parse_qs(query).get("name[]")  # custom collectors have no describe(): filtered here
    openmetrics = content_type.startswith("application/openmetrics-text")
    body = encoder(_Served(registry, frozenset(bare_counters), openmetrics,
                           frozenset(names) if names else None))  # type: ignore[arg-type]
    if not openmetrics:
        body = _bare(body, bare_counters)
    headers = {"Content-Type": content_type}
    if gzip_accepted(accept_encoding or ""):
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return body, headers


def render(registry: CollectorRegistry, bare_counters: Collection[str] = ()) -> bytes:
    """The text exposition (0.0.4) of ``registry``, with the counters named in ``bare_counters``
    typed under their own name (their samples carry it already)."""
    return exposition(registry, bare_counters)[0]


def _bare(text: bytes, bare_counters: Collection[str]) -> bytes:
    for name in bare_counters:
        n = name.encode()
        text = text.replace(b"# HELP " + n + b"_total ", b"# HELP " + n + b" ", 1)
        text = text.replace(b"# TYPE " + n + b"_total counter", b"# TYPE " + n + b" counter", 1)
    return text


def serve(registry: CollectorRegistry, port: int, bind: str = "127.0.0.1",
          bare_counters: Collection[str] = (), ready: Readiness | None = None) -> ThreadingHTTPServer:
    """Serve ``registry`` on ``http://bind:port/metrics`` until ``shutdown()``; a port already taken
    raises OSError at once. ``ready``: the ``/-/ready`` check (None: ready while serving); a check
    that raises answers 503 with the exception's type."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path, _, query = self.path.partition("?")
            if path == "/metrics":
                body, headers = exposition(registry, bare_counters, self.headers.get("Accept"),
                                           self.headers.get("Accept-Encoding"), query)
                self._answer(200, body, headers.pop("Content-Type"), headers)
            elif path == "/-/healthy":
                self._answer(200, b"ok\n", "text/plain")
            elif path == "/-/ready":
                why = readiness(ready)
                self._answer(503 if why else 200, f"not ready: {why}\n".encode() if why else b"ready\n",
                             "text/plain; charset=utf-8")
            else:
                self._answer(404, b"not found: try /metrics\n", "text/plain")

        def _answer(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # scrapes are not worth a log line each
            pass

    server = _Server((bind, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    log.info("Prometheus metrics on http://%s:%d/metrics", bind, server.server_port)
    watchdog.start(bind, server.server_port, server.stopped)
    return server


class _Server(ThreadingHTTPServer):
    """The metrics server; ``stopped`` is set by ``shutdown()`` (it ends the watchdog's feed)."""

    def __init__(self, *args: object, **kw: object) -> None:
        super().__init__(*args, **kw)  # type: ignore[arg-type]
        self.stopped = threading.Event()

    def shutdown(self) -> None:
        self.stopped.set()
        super().shutdown()


def readiness(ready: Readiness | None) -> str | None:
    """What ``/-/ready`` answers: None (ready), or the reason it is not."""
    if ready is None:
        return None
    try:
        return ready()
    except Exception as e:  # noqa: BLE001 - a failing check is a not-ready process, said so
        return f"readiness check failed ({type(e).__name__})"


def serve_from(registry: CollectorRegistry, endpoint: MetricsEndpoint, override: int | None = None,
               bare_counters: Collection[str] = (), ready: Readiness | None = None) -> ThreadingHTTPServer | None:
    """:func:`serve` on the endpoint's port and bind (or ``override``'s port); None when off."""
    port = override or endpoint.metrics_port
    if port is None:
        watchdog.alive_only()
        return None
    return serve(registry, port, endpoint.metrics_bind, bare_counters, ready)
