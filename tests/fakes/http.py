"""Fake chat/on-call platforms: real HTTP servers on 127.0.0.1 that check what the docs require.

Each fake checks the documented signature and payload shape, enforces the
documented rate limit on the (injectable) clock, and answers with the
platform's own error codes. ``down_until`` makes it answer 503 until then;
``script`` forces the next answers (e.g. a 429 with Retry-After).
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
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, dict[str, str], bytes]


@dataclass
class Received:
    at: float
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes
    answer: Answer = (0, {}, b"")

    @property
    def json(self) -> dict:
        return json.loads(self.raw)


class SlidingWindow:
    """At most ``count`` accepted in any ``window`` seconds: the platform's own accounting."""

    def __init__(self, count: int, window: float) -> None:
        self.count, self.window = count, window
        self.times: deque[float] = deque()

    def expire(self, now: float) -> None:
        while self.times and self.times[0] <= now - self.window:
            self.times.popleft()


def max_in_window(times: list[float], window: float) -> int:
    """The most of ``times`` in any ``window``-long span (ending at one of them), as a platform counts."""
    return max((sum(1 for u in times if t - window < u <= t) for t in times), default=0)


class FakeServer:
    limits: list[tuple[int, float]] = []

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.requests: list[Received] = []
        self.accepted: list[Received] = []
        self.down_until: float | None = None
        self.script: deque[Answer] = deque()
        self._windows = [SlidingWindow(c, w) for c, w in self.limits]
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", 0))
                parts = urlsplit(self.path)
                rec = Received(fake.clock(), parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()},
                               {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                status, headers, body = fake._answer(rec)
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(self, rec: Received) -> Answer:
        with self._lock:
            self.requests.append(rec)
            if self.script:
                rec.answer = self.script.popleft()
            elif self.down_until is not None and rec.at < self.down_until:
                rec.answer = (503, {}, b"service unavailable")
            else:
                rec.answer = self.handle(rec)
            if 200 <= rec.answer[0] < 300 and self.success(rec.answer):
                self.accepted.append(rec)
            return rec.answer

    def admit(self, now: float) -> bool:
        """Count against every window; rejected sends do not count."""
        for w in self._windows:
            w.expire(now)
        if any(len(w.times) >= w.count for w in self._windows):
            return False
        for w in self._windows:
            w.times.append(now)
        return True

    def success(self, answer: Answer) -> bool:
        return True

    def handle(self, rec: Received) -> Answer:
        raise NotImplementedError


def _json(status: int, obj: dict, headers: dict[str, str] | None = None) -> Answer:
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(obj).encode()


class JsonCodeServer(FakeServer):
    """Platforms that answer HTTP 200 and put success in a body code."""

    code_field = "errcode"

    def success(self, answer: Answer) -> bool:
        return json.loads(answer[2]).get(self.code_field) == 0


# ----------------------------------------------------------------------------- Slack


#: Block Kit as docs.slack.dev/reference/block-kit describes the blocks Slack takes in a message.
RICH_TEXT_OBJECTS = {"rich_text_section", "rich_text_list", "rich_text_preformatted", "rich_text_quote"}
RICH_TEXT_ELEMENTS = {"text", "link", "emoji", "user", "usergroup", "channel", "broadcast", "team", "date", "color"}
#: The field each mention element requires (its reference page: ``user_id`` "Required", ``usergroup_id`` …).
MENTION_IDS = {"user": "user_id", "usergroup": "usergroup_id"}


def valid_element(e: dict) -> bool:
    kind = e.get("type")
    return (kind in RICH_TEXT_ELEMENTS and isinstance(e.get("text", ""), str)
            and (kind not in MENTION_IDS or bool(e.get(MENTION_IDS[kind]))))


def valid_block(b: dict) -> bool:
    """A header/section/context/rich_text block shaped as the reference says (text objects 1-3000 characters,
    a header's 150, every rich text element a known type with its text a string, a mention with its id)."""
    def text_object(t: dict, limit: int = 3000) -> bool:
        return t.get("type") in ("plain_text", "mrkdwn") and 1 <= len(t.get("text", "")) <= limit

    kind = b.get("type")
    if kind == "header":
        return b["text"]["type"] == "plain_text" and text_object(b["text"], 150)
    if kind == "section":
        return text_object(b["text"])
    if kind == "context":
        return 1 <= len(b["elements"]) <= 10 and all(map(text_object, b["elements"]))
    if kind == "rich_text":
        return bool(b["elements"]) and all(
            o.get("type") in RICH_TEXT_OBJECTS and o["elements"]
            and all(map(valid_element, o["elements"]))
            for o in b["elements"])
    return False


class FakeSlack(FakeServer):
    limits = [(1, 1.0)]
    path = "/services/T000/B000/XXXXSECRETSLACK"

    def handle(self, rec: Received) -> Answer:
        if rec.path != self.path:
            return 404, {}, b"no_service"
        try:
            body = rec.json
        except ValueError:
            return 400, {}, b"invalid_payload"
        if not body.get("text") and not body.get("blocks"):
            return 400, {}, b"no_text"
        if len(body.get("blocks", [])) > 50 or not all(map(valid_block, body.get("blocks", []))):
            return 400, {}, b"invalid_blocks"
        if not self.admit(rec.at):
            return 429, {"Retry-After": "1"}, b"rate_limited"
        return 200, {}, b"ok"


# ----------------------------------------------------------------------------- Feishu


def feishu_sign(ts: str, secret: str) -> str:
    return base64.b64encode(hmac.new(f"{ts}\n{secret}".encode(), b"", hashlib.sha256).digest()).decode()


class FakeFeishu(JsonCodeServer):
    limits = [(5, 1.0), (100, 60.0)]
    code_field = "code"
    hook = "/open-apis/bot/v2/hook/feishu-hook-id-secret"

    def __init__(self, clock: Callable[[], float] = time.time, secret: str | None = None) -> None:
        super().__init__(clock)
        self.secret = secret

    def handle(self, rec: Received) -> Answer:
        if rec.path != self.hook:
            return _json(404, {"code": 19001, "msg": "param invalid: incoming webhook access token invalid"})
        if len(rec.raw) > 20 * 1024:
            return _json(200, {"code": 9499, "msg": "Bad Request"})
        try:
            body = rec.json
        except ValueError:
            return _json(200, {"code": 9499, "msg": "Bad Request"})
        if self.secret is not None:
            ts = body.get("timestamp", "")
            ok_time = ts.isdigit() and abs(int(ts) - rec.at) <= 3600
            if not ok_time or body.get("sign") != feishu_sign(ts, self.secret):
                return _json(200, {"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"})
        if body.get("msg_type") != "interactive" or not isinstance(body.get("card"), dict) or "content" in body:
            return _json(200, {"code": 9499, "msg": "Bad Request"})
        if not self.admit(rec.at):
            return _json(200, {"code": 11232, "msg": "frequency limited psm[lark.oapi.app_platform_runtime]"})
        return _json(200, {"code": 0, "data": {}, "msg": "success"})


# ----------------------------------------------------------------------------- DingTalk


def dingtalk_sign(ts: str, secret: str) -> str:
    """The sign as the server sees it (already URL-decoded by the query parser)."""
    return base64.b64encode(hmac.new(secret.encode(), f"{ts}\n{secret}".encode(), hashlib.sha256).digest()).decode()


class FakeDingTalk(JsonCodeServer):
    limits = [(20, 60.0)]
    token = "dingtalk-access-token-secret"

    def __init__(self, clock: Callable[[], float] = time.time, secret: str | None = None) -> None:
        super().__init__(clock)
        self.secret = secret

    def handle(self, rec: Received) -> Answer:
        if rec.path != "/robot/send" or rec.query.get("access_token") != self.token:
            return _json(200, {"errcode": 300001, "errmsg": "token is not exist"})
        if self.secret is not None:
            ts = rec.query.get("timestamp", "")
            ok_time = ts.isdigit() and abs(int(ts) / 1000 - rec.at) <= 3600
            if not ok_time or rec.query.get("sign") != dingtalk_sign(ts, self.secret):
                return _json(200, {"errcode": 310000, "errmsg": "sign not match, more: [https://ding-doc.dingtalk.com/doc#/serverapi2/qf2nxq]"})
        body = rec.json
        kind = body.get("msgtype")
        if kind == "markdown":
            md = body.get("markdown") or {}
            if not md.get("title") or not md.get("text"):
                return _json(200, {"errcode": 40035, "errmsg": "缺少参数 json"})
        elif kind == "actionCard":
            card = body.get("actionCard") or {}
            if not all(card.get(k) for k in ("title", "text", "singleTitle", "singleURL")):
                return _json(200, {"errcode": 40035, "errmsg": "缺少参数 json"})
        else:
            return _json(200, {"errcode": 40035, "errmsg": "缺少参数 json"})
        if not self.admit(rec.at):
            return _json(200, {"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"})
        return _json(200, {"errcode": 0, "errmsg": "ok"})


# ----------------------------------------------------------------------------- WeCom


class FakeWeCom(JsonCodeServer):
    limits = [(20, 60.0)]
    key = "wecom-robot-key-secret"

    def handle(self, rec: Received) -> Answer:
        if rec.path != "/cgi-bin/webhook/send" or rec.query.get("key") != self.key:
            return _json(200, {"errcode": 93000, "errmsg": "invalid webhook url"})
        body = rec.json
        content = (body.get("markdown") or {}).get("content", "")
        if body.get("msgtype") != "markdown" or not content:
            return _json(200, {"errcode": 40008, "errmsg": "invalid message type"})
        if len(content.encode()) > 4096:
            return _json(200, {"errcode": 40058, "errmsg": "markdown.content exceed max length 4096"})
        if not self.admit(rec.at):
            return _json(200, {"errcode": 45009, "errmsg": "api freq out of limit"})
        return _json(200, {"errcode": 0, "errmsg": "ok"})


# ----------------------------------------------------------------------------- PagerDuty


class FakePagerDuty(FakeServer):
    limits = [(120, 60.0)]

    def handle(self, rec: Received) -> Answer:
        if rec.path != "/v2/enqueue":
            return _json(404, {"status": "not found"})
        try:
            ev = rec.json
        except ValueError:
            return _json(400, {"status": "invalid event", "message": "Event object is invalid", "errors": ["bad json"]})
        errors = []
        if len(ev.get("routing_key", "")) != 32:
            errors.append("'routing_key' must be 32 characters")
        action = ev.get("event_action")
        if action not in ("trigger", "acknowledge", "resolve"):
            errors.append("'event_action' is invalid")
        if action in ("acknowledge", "resolve") and not ev.get("dedup_key"):
            errors.append("'dedup_key' is required for acknowledge and resolve")
        if len(ev.get("dedup_key", "")) > 255:
            errors.append("'dedup_key' is too long")
        if action == "trigger":
            p = ev.get("payload") or {}
            for f in ("summary", "source", "severity"):
                if not p.get(f):
                    errors.append(f"'payload.{f}' is missing or blank")
            if p.get("severity") not in ("critical", "error", "warning", "info"):
                errors.append("'payload.severity' is invalid")
            if len(p.get("summary", "")) > 1024:
                errors.append("'payload.summary' is too long")
        if errors:
            return _json(400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors})
        if not self.admit(rec.at):
            return _json(429, {"status": "throttled", "message": "Requests for this service are arriving too quickly"})
        return _json(202, {"status": "success", "message": "Event processed", "dedup_key": ev.get("dedup_key")})


# ----------------------------------------------------------------------------- generic webhook


class FakeWebhook(FakeServer):
    """An Alertmanager webhook receiver: checks the v4 payload keys."""

    V4_KEYS = {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
               "commonLabels", "commonAnnotations", "externalURL", "alerts"}
    ALERT_KEYS = {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}

    def __init__(self, clock: Callable[[], float] = time.time, token: str | None = None) -> None:
        super().__init__(clock)
        self.token = token

    def handle(self, rec: Received) -> Answer:
        if self.token and rec.headers.get("authorization") != f"Bearer {self.token}":
            return 401, {}, b"unauthorized"
        body = rec.json
        if not self.V4_KEYS <= body.keys() or body["version"] != "4":
            return 400, {}, b"not an Alertmanager v4 payload"
        if any(not self.ALERT_KEYS <= a.keys() for a in body["alerts"]):
            return 400, {}, b"alert missing keys"
        return 200, {}, b""


# ----------------------------------------------------------------------------- Apprise json://


class FakeAppriseJson(FakeServer):
    """What Apprise's ``json://`` schema posts (apprise plugins/custom_json.py): ``version`` "1.0",
    ``title``, ``message``, ``attachments``, ``type`` (info|success|warning|failure); a secret path."""

    path = "/hooks/apprise-sink-token-0123456789"
    TYPES = ("info", "success", "warning", "failure")

    def url(self, schema: str = "json") -> str:
        return f"{schema}://127.0.0.1:{self.port}{self.path}"

    def handle(self, rec: Received) -> Answer:
        if rec.path != self.path:
            return 404, {}, b"no such hook"
        try:
            body = rec.json
        except ValueError:
            return 400, {}, b"not json"
        ok = (body.get("version") == "1.0" and isinstance(body.get("title"), str)
              and isinstance(body.get("message"), str) and body.get("type") in self.TYPES)
        return (200, {}, b"") if ok else (400, {}, b"not an apprise json payload")
