"""What a channel says about one platform response, and the request it builds.

Every channel's ``send`` ends in one of these verdicts; for the HTTP platforms
(:class:`~gpuwarden.notifiers.http_channel.HttpChannel`) a pure
``build_request`` turns a notification into bytes and a pure ``classify``
turns the platform's answer into the verdict. Delivery acts on it (retry,
wait, fall back) without knowing the platform.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from gpuwarden.config import SecretRef
from gpuwarden.notifiers.redact import REDACTOR

if TYPE_CHECKING:
    from gpuwarden.notifiers.receivers import BasicAuth


class HttpRequest(NamedTuple):
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True, slots=True)
class Ok:
    detail: str = "ok"


@dataclass(frozen=True, slots=True)
class Retry:
    """Transient: 5xx, timeout, rate limit. ``after_s`` is the platform's hint (Retry-After), if any."""

    after_s: float | None
    message: str


@dataclass(frozen=True, slots=True)
class Permanent:
    """Will fail the same way again (bad signature, bad payload): the platform's own message."""

    message: str
    auth: bool = False
    """An authentication or signature failure: the receiver refuses every message until its secret is right."""
    reason: str = ""
    """The platform's words and code alone (``sign match fail (19021)``), for the meta alert; never a secret."""


Verdict = Ok | Retry | Permanent


def retry_after(headers: dict[str, str] | object) -> float | None:
    """Seconds from a ``Retry-After`` header (delta-seconds form); None when absent or unparseable."""
    get = getattr(headers, "get", None)
    value = get("retry-after") or get("Retry-After") if get else None
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def http_status_verdict(status: int, headers: object, body: bytes) -> Verdict | None:
    """The verdict HTTP alone decides (429, 5xx, other 4xx); None when the body must be read."""
    text = body[:300].decode("utf-8", "replace")
    if status == 429:
        return Retry(retry_after(headers), f"HTTP 429 rate limited: {text}")
    if status >= 500:
        return Retry(retry_after(headers), f"HTTP {status}: {text}")
    if status >= 400:  # 401/403: the credentials (token, key, basic auth) are refused
        return Permanent(f"HTTP {status}: {text}", auth=status in (401, 403), reason=f"HTTP {status} {text.strip()}")
    return None


def status_verdict(status: int, headers: object, body: bytes) -> Verdict:
    """For platforms whose HTTP status says it all: 2xx ok, 429 and 5xx retry, the rest permanent."""
    if (v := http_status_verdict(status, headers, body)) is not None:
        return v
    return Ok() if 200 <= status < 300 else Permanent(f"HTTP {status}: {body[:300].decode('utf-8', 'replace')}")


def reveal(ref: SecretRef) -> str:
    """The secret's value as it is now (a rotated file is used by the next request), for building a
    request; registered with redaction before it is returned. Never log what this returns."""
    value = ref.resolve().get_secret_value()
    REDACTOR.add((value,))
    return value


def authorization(token: SecretRef | None, basic: BasicAuth | None = None) -> str | None:
    """The ``Authorization`` value for a bearer token or basic auth (None: neither); never log it."""
    if token is not None:
        return f"Bearer {reveal(token)}"
    if basic is not None:
        return "Basic " + base64.b64encode(f"{basic.username}:{reveal(basic.password)}".encode()).decode()
    return None


def json_request(url: str, payload: object, headers: dict[str, str] | None = None) -> HttpRequest:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return HttpRequest(url, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body)


def json_body(body: bytes) -> dict | None:
    """The response body as a JSON object, or None when it is not one."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def body_code_verdict(status: int, headers: object, body: bytes, *, platform: str, code_keys: tuple[str, ...],
                      msg_keys: tuple[str, ...], retry: dict[int, float | None],
                      auth: tuple[int, ...] = ()) -> Verdict:
    """For platforms that answer HTTP 200 and say in a body code whether it worked (0 = ok).

    ``retry`` maps the codes that mean "try again" (rate limits) to a wait hint; ``auth`` lists
    those that mean the signature or token is refused; every other non-zero code is permanent
    and reported with the platform's text.
    """
    if (v := http_status_verdict(status, headers, body)) is not None:
        return v
    data = json_body(body)
    if data is None:
        return Retry(None, f"HTTP {status}: not a {platform} JSON answer")
    code = next((data[k] for k in code_keys if k in data), None)
    text = next((data[k] for k in msg_keys if k in data), "")
    msg = f"{platform} {code_keys[0]} {code}: {text}"
    if code == 0:
        return Ok()
    if code in retry:
        return Retry(retry[code], msg)
    return Permanent(msg, auth=code in auth, reason=f"{text} ({code})")
