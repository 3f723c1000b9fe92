"""Serving a worker's Prometheus registry on ``/metrics``: the agent, stream and notify workers share it.

prometheus-client's own HTTP server, in a daemon thread: scrapes never wait on the worker's
event loop, and the loop's counters are thread-safe to read (prometheus-client locks them).
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

from gpuwarden.config import MetricsEndpoint

log = logging.getLogger("gpuwarden")


def serve(registry: CollectorRegistry, port: int, bind: str = "127.0.0.1") -> Any:
    """Serve ``registry`` on ``http://bind:port/metrics`` until the process ends; returns the server
    (``shutdown()`` stops it). A port already taken raises OSError at once."""
    server, _ = start_http_server(port, addr=bind, registry=registry)
    log.info("Prometheus metrics on http://%s:%d/metrics", bind, server.server_port)
    return server


def serve_from(registry: CollectorRegistry, endpoint: MetricsEndpoint, override: int | None = None) -> Any:
    """:func:`serve` on the endpoint's port and bind (or ``override``'s port); None when off."""
    port = override or endpoint.metrics_port
    return None if port is None else serve(registry, port, endpoint.metrics_bind)
