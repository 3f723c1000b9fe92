"""A serving engine's fake ``/metrics`` endpoint on a loopback HTTP server: whatever metrics
object it holds (``render()`` gives the exposition), answering garbage, HTTP 500 or nothing
(``close``) on demand. ``restart()`` gives it new metrics: every total from zero, as a restarted
server has."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class FakeEndpoint:
    """``http://127.0.0.1:<port>/metrics`` serving ``metrics.render()``; subclasses say what metrics."""

    models: list[str]
    mode: str = "ok"  # ok | garbage | http500
    metrics: Any = field(init=False)

    def new_metrics(self) -> Any:
        raise NotImplementedError

    def __post_init__(self) -> None:
        self.metrics = self.new_metrics()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if fake.mode == "http500":
                    body, status = b"internal error", 500
                elif fake.mode == "garbage":
                    body, status = b"<html>\n<body>{not: metrics}</body>\nvllm:num_requests_running{ 1 2 3\n", 200
                else:
                    body, status = fake.metrics.render(), 200
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def restart(self) -> None:
        """A restarted server: the same endpoint, every total from zero."""
        self.metrics = self.new_metrics()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
