"""Loopback stand-ins for the platforms, written from their documentation, not from our clients.

Each server is real HTTP on 127.0.0.1, keeps the platform's own accounting on
its own clock (the wall clock unless a test simulates it) and answers the way
the platform documents it:

- Slack incoming webhook: ``POST /services/T…/B…/…``, JSON with ``text`` and/or
  ``blocks`` (at most 50), ``200 ok``; over 1 message per second ``429`` with
  ``Retry-After: <seconds>``; errors as plain text (``no_text``, ``invalid_blocks``).
- Feishu custom bot: ``POST /open-apis/bot/v2/hook/<id>``, HTTP 200 always, body
  ``code`` 0 = ok; signed bots need ``timestamp`` (s) within one hour and
  ``sign = base64(HMAC-SHA256(key=timestamp+"\\n"+secret, msg=""))``, else 19021;
  over 5/s or 100/min per bot, 11232; a body over 20 KB, 9499.
- DingTalk custom robot: ``POST /robot/send?access_token=…&timestamp=<ms>&sign=…``,
  ``sign = urlencode(base64(HMAC-SHA256(key=secret, msg=timestamp+"\\n"+secret)))``,
  timestamp within one hour, else errcode 310000; over 20 per minute, 130101.
- WeCom group robot: ``POST /cgi-bin/webhook/send?key=…``, markdown content at
  most 4096 bytes (40058), over 20 per minute errcode 45009.
- PagerDuty Events API v2: ``POST /v2/enqueue``; 202 ``{"status":"success",
  "dedup_key":…}``; 400 ``invalid event`` (32-char ``routing_key``, an
  ``event_action``, trigger needs ``payload.summary/source/severity``,
  acknowledge/resolve need ``dedup_key``); over 120 events per minute, 429.
  ``open`` holds the incidents triggered and not resolved, by dedup_key.

``script`` forces the next answers (e.g. a run of 429s); ``hits`` records every
request with its arrival time, so tests judge windows and delays from what the
platform saw.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, dict[str, str], bytes]
HOUR_S = 3600.0


@dataclass
class Hit:
    at: float
    path: str
    query: dict[str, str]
    body: bytes
    answer: Answer = (0, {}, b"")

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def ok(self) -> bool:
        status, _, body = self.answer
        if status == 200 and body.startswith(b"{"):
            data = json.loads(body)
            return data.get("code", data.get("errcode")) == 0
        return status in (200, 202)


def most_in_window(times: list[float], window: float) -> int:
    """The most arrivals in any ``window``-long span (t - window, t], as the platform counts."""
    ordered = sorted(times)
    best, lo = 0, 0
    for hi, t in enumerate(ordered):
        while ordered[lo] <= t - window:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


@dataclass
class Window:
    count: int
    seconds: float
    seen: deque[float] = field(default_factory=deque)

    def full(self, now: float) -> bool:
        while self.seen and self.seen[0] <= now - self.seconds:
            self.seen.popleft()
        return len(self.seen) >= self.count


class Platform:
    """A threaded loopback HTTP server; subclasses answer one request in ``answer``."""

    limits: tuple[tuple[int, float], ...] = ()

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.hits: list[Hit] = []
        self.script: deque[Answer] = deque()
        self.windows = [Window(c, s) for c, s in self.limits]
        self.lock = threading.Lock()
        platform = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                parts = urlsplit(self.path)
                hit = Hit(platform.clock(), parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}, body)
                with platform.lock:
                    platform.hits.append(hit)
                    hit.answer = platform.script.popleft() if platform.script else platform.answer(hit)
                status, headers, out = hit.answer
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Platform:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def over_limit(self, now: float) -> bool:
        """Count this request against every window unless one is full (a refused one is not counted)."""
        if any(w.full(now) for w in self.windows):
            return True
        for w in self.windows:
            w.seen.append(now)
        return False

    def answer(self, hit: Hit) -> Answer:
        raise NotImplementedError

    @property
    def accepted(self) -> list[Hit]:
        return [h for h in self.hits if h.ok]


def _json(status: int, obj: dict, headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(obj).encode()


class Slack(Platform):
    limits = ((1, 1.0),)
    path = "/services/T0AAAAAAA/B0BBBBBBB/slackwebhooksecret0000000"

    @property
    def url(self) -> str:
        return self.base + self.path

    def answer(self, hit: Hit) -> Answer:
        text = {"Content-Type": "text/html"}
        if hit.path != self.path:
            return 404, text, b"no_service"
        try:
            msg = hit.json
        except ValueError:
            return 400, text, b"invalid_payload"
        if not msg.get("text") and not msg.get("blocks"):
            return 400, text, b"no_text"
        if len(msg.get("blocks") or []) > 50:
            return 400, text, b"invalid_blocks"
        if self.over_limit(hit.at):
            return 429, {**text, "Retry-After": "1"}, b"rate_limited"
        return 200, text, b"ok"


class Signed(Platform):
    """A bot that may be signed: ``secret`` None accepts unsigned requests."""

    def __init__(self, secret: str | None = None, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.secret = secret


class Feishu(Signed):
    limits = ((5, 1.0), (100, 60.0))
    hook = "/open-apis/bot/v2/hook/0b5c3f0e-feishu-hook-secret"

    @property
    def url(self) -> str:
        return self.base + self.hook

    def answer(self, hit: Hit) -> Answer:
        if hit.path != self.hook:
            return _json(200, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid"})
        if len(hit.body) > 20 * 1024:
            return _json(200, {"code": 9499, "msg": "Bad Request", "data": {}})
        msg = hit.json
        if self.secret is not None:
            ts = str(msg.get("timestamp", ""))
            key = f"{ts}\n{self.secret}".encode()
            want = base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
            if not ts.isdigit() or abs(hit.at - int(ts)) > HOUR_S or msg.get("sign") != want:
                return _json(200, {"code": 19021, "msg": "sign match fail or timestamp is not within one hour "
                                                         "from current time", "data": {}})
        if self.over_limit(hit.at):
            return _json(200, {"code": 11232, "msg": "frequency limited psm[lark.oapi.app_platform_runtime]",
                               "data": {}})
        return _json(200, {"code": 0, "data": {}, "msg": "success"})


class DingTalk(Signed):
    limits = ((20, 60.0),)
    token = "dingtalk0access0token0secret"

    @property
    def url(self) -> str:
        return f"{self.base}/robot/send?access_token={self.token}"

    def answer(self, hit: Hit) -> Answer:
        if hit.path != "/robot/send" or hit.query.get("access_token") != self.token:
            return _json(200, {"errcode": 300001, "errmsg": "token is not exist"})
        if self.secret is not None:
            ts = hit.query.get("timestamp", "")
            mac = hmac.new(self.secret.encode(), f"{ts}\n{self.secret}".encode(), hashlib.sha256).digest()
            # parse_qs already undid the URL encoding of ``sign``
            if not ts.isdigit() or abs(hit.at - int(ts) / 1000) > HOUR_S \
                    or hit.query.get("sign") != base64.b64encode(mac).decode():
                return _json(200, {"errcode": 310000, "errmsg": "sign not match, more: "
                                                               "[https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"})
        if self.over_limit(hit.at):
            return _json(200, {"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"})
        return _json(200, {"errcode": 0, "errmsg": "ok"})


class WeCom(Platform):
    limits = ((20, 60.0),)
    key = "693a91f6-7xxx-4bc4-97a0-0ec2sifa5aaa"

    @property
    def url(self) -> str:
        return f"{self.base}/cgi-bin/webhook/send?key={self.key}"

    def answer(self, hit: Hit) -> Answer:
        if hit.path != "/cgi-bin/webhook/send" or hit.query.get("key") != self.key:
            return _json(200, {"errcode": 93000, "errmsg": "invalid webhook url"})
        msg = hit.json
        if msg.get("msgtype") == "markdown" and len(msg["markdown"].get("content", "").encode()) > 4096:
            return _json(200, {"errcode": 40058, "errmsg": "markdown.content exceed max length 4096"})
        if self.over_limit(hit.at):
            return _json(200, {"errcode": 45009, "errmsg": "api freq out of limit"})
        return _json(200, {"errcode": 0, "errmsg": "ok"})


class PagerDuty(Platform):
    limits = ((120, 60.0),)
    routing_key = "R0UT1NGKEY0123456789abcdefABCDEF"

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        super().__init__(clock)
        self.open: dict[str, float] = {}
        """dedup_key → arrival of the trigger that opened the incident."""

    @property
    def url(self) -> str:
        return self.base + "/v2/enqueue"

    def answer(self, hit: Hit) -> Answer:
        try:
            ev = hit.json
        except ValueError:
            return _json(400, {"status": "invalid event", "message": "Event object is invalid"})
        errors = []
        if len(str(ev.get("routing_key", ""))) != 32:
            errors.append("'routing_key' must be 32 characters")
        action = ev.get("event_action")
        if action not in ("trigger", "acknowledge", "resolve"):
            errors.append("'event_action' is missing or invalid")
        if action == "trigger":
            p = ev.get("payload") or {}
            errors += [f"'payload.{k}' is missing" for k in ("summary", "source", "severity") if not p.get(k)]
        elif not ev.get("dedup_key"):
            errors.append("'dedup_key' is required for acknowledge and resolve")
        if errors:
            return _json(400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors})
        if self.over_limit(hit.at):
            return _json(429, {"status": "throttled", "message": "Requests for this service are arriving too quickly."})
        key = ev.get("dedup_key") or hashlib.sha1(hit.body).hexdigest()
        if action == "trigger":
            self.open.setdefault(key, hit.at)
        elif action == "resolve":
            self.open.pop(key, None)
        return _json(202, {"status": "success", "message": "Event processed", "dedup_key": key})
