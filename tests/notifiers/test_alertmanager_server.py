"""The webhook's HTTP edge: auth when asked, a body limit, 400 with the reason, accepted alerts to the sink.

Driven through Starlette's ASGI interface with httpx (no port); the real
server on a socket, posted to by a real Alertmanager, is in
tests/acceptance/test_alertmanager.py.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gpuwarden.app.settings import validate_settings
from gpuwarden.config import ConfigError
from gpuwarden.contract import AlertTransition
from gpuwarden.notifiers import am_server
from gpuwarden.notifiers.config import AlertmanagerWebhookConfig

FIRING = (Path(__file__).resolve().parent.parent / "fixtures" / "alertmanager" / "am-0.25.0-webhook-firing.json").read_bytes()
TOKEN = "am-webhook-token-0123456789"


class Sink:
    def __init__(self) -> None:
        self.got: list[AlertTransition] = []

    async def __call__(self, accepted: list[AlertTransition]) -> None:
        self.got += accepted


def client(cfg: AlertmanagerWebhookConfig, sink: Sink) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=am_server.app(cfg, sink)), base_url="http://gw")


@pytest.fixture
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AM_HOOK_TOKEN", TOKEN)
    monkeypatch.setenv("AM_HOOK_PASSWORD", "pa:ss")


async def test_an_accepted_payload_reaches_the_sink_and_says_how_many() -> None:
    sink = Sink()
    async with client(AlertmanagerWebhookConfig(), sink) as c:
        r = await c.post(am_server.WEBHOOK_PATH, content=FIRING)
        health = await c.get(am_server.HEALTH_PATH)
    assert r.status_code == 200 and r.json() == {"accepted": 1, "skipped": 0}
    assert [t.fingerprint for t in sink.got] == ["am-c77244967ba00f9a"]
    assert health.status_code == 200


async def test_a_bad_payload_is_400_with_the_reason_and_nothing_is_accepted() -> None:
    sink = Sink()
    msg = json.loads(FIRING)
    msg["alerts"].append({**msg["alerts"][0], "status": "pending"})
    async with client(AlertmanagerWebhookConfig(), sink) as c:
        r = await c.post(am_server.WEBHOOK_PATH, content=json.dumps(msg))
    assert r.status_code == 400
    assert "alerts[1].status: Input should be 'firing' or 'resolved'" in r.text
    assert sink.got == []


@pytest.mark.usefixtures("token_env")
@pytest.mark.parametrize(("header", "status"), [
    (None, 401), (f"Bearer {TOKEN}x", 401), (f"Bearer {TOKEN[:-1]}", 401), (f"bearer {TOKEN}", 401),
    (f"Bearer {TOKEN}", 200),
])
async def test_a_bearer_token_is_required_when_configured(header: str | None, status: int) -> None:
    cfg = AlertmanagerWebhookConfig(bind="0.0.0.0", token={"env": "AM_HOOK_TOKEN"})
    sink = Sink()
    async with client(cfg, sink) as c:
        r = await c.post(am_server.WEBHOOK_PATH, content=FIRING, headers={"Authorization": header} if header else {})
    assert r.status_code == status
    assert len(sink.got) == (status == 200)
    if status == 401:
        assert r.headers["www-authenticate"].startswith("Bearer") and TOKEN not in r.text


@pytest.mark.usefixtures("token_env")
async def test_basic_auth_is_the_other_way() -> None:
    cfg = AlertmanagerWebhookConfig(bind="0.0.0.0", basic_auth={"username": "am", "password": {"env": "AM_HOOK_PASSWORD"}})
    good = "Basic " + base64.b64encode(b"am:pa:ss").decode()
    bad = "Basic " + base64.b64encode(b"am:pa:sS").decode()
    async with client(cfg, Sink()) as c:
        ok = await c.post(am_server.WEBHOOK_PATH, content=FIRING, headers={"Authorization": good})
        refused = await c.post(am_server.WEBHOOK_PATH, content=FIRING, headers={"Authorization": bad})
    assert (ok.status_code, refused.status_code) == (200, 401)


async def test_a_body_over_the_limit_is_refused_announced_or_streamed() -> None:
    cfg = AlertmanagerWebhookConfig(max_body_bytes=2048)
    sink = Sink()
    big = FIRING + b" " * 4096  # still valid JSON: only its size is wrong

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds on the stream
        for i in range(0, len(big), 512):
            yield big[i:i + 512]

    async with client(cfg, sink) as c:
        announced = await c.post(am_server.WEBHOOK_PATH, content=big)
        streamed = await c.post(am_server.WEBHOOK_PATH, content=chunks())
    assert announced.status_code == streamed.status_code == 413
    assert "max_body_bytes" in announced.text and sink.got == []


def test_authorization_compares_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    monkeypatch.setattr(am_server.hmac, "compare_digest", lambda a, b: calls.append((a, b)) or a == b)
    assert am_server.authorized("Bearer x", b"Bearer x") and not am_server.authorized("Bearer y", b"Bearer x")
    assert calls == [(b"Bearer x", b"Bearer x"), (b"Bearer y", b"Bearer x")]


@pytest.mark.parametrize("bind", ["0.0.0.0", "192.0.2.7", "::"])
def test_off_loopback_without_auth_fails_at_start_naming_the_key(bind: str) -> None:
    with pytest.raises(ConfigError) as e:
        validate_settings({"notify": {"alertmanager_webhook": {"bind": bind}}}, "gw.yaml")
    assert "gw.yaml: notify.alertmanager_webhook: expected 'token' or 'basic_auth' when bind is not a loopback" in str(e.value)


def test_a_mistyped_key_fails_at_start_naming_it() -> None:
    with pytest.raises(ConfigError) as e:  # a typo of `token` must not leave the webhook open
        validate_settings({"notify": {"alertmanager_webhook": {"tokn": {"env": "X"}}}}, "gw.yaml")
    assert "gw.yaml: notify.alertmanager_webhook.tokn: unknown key (did you mean 'token'?)" in str(e.value)


@pytest.mark.parametrize("bind", ["127.0.0.1", "::1", "localhost", "127.0.0.53"])
def test_loopback_needs_no_auth(bind: str) -> None:
    validate_settings({"notify": {"alertmanager_webhook": {"bind": bind}}})


def test_a_taken_port_fails_at_start_with_the_address() -> None:
    with am_server.listen("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(am_server.ListenError, match=f"cannot listen on 127.0.0.1:{port}"):
            am_server.listen("127.0.0.1", port)


async def test_alerts_alertmanager_truncated_are_said_to_be_missing(caplog: pytest.LogCaptureFixture) -> None:
    msg = json.loads(FIRING) | {"truncatedAlerts": 3}
    async with client(AlertmanagerWebhookConfig(), Sink()) as c:
        r = await c.post(am_server.WEBHOOK_PATH, content=json.dumps(msg))
    assert r.status_code == 200
    assert "left out 3 alerts" in caplog.text and "max_alerts" in caplog.text


def test_notify_no_kafka_says_what_is_missing_or_taken(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuwarden.app.cli import main

    bare = tmp_path / "bare.yaml"
    bare.write_text(f"spool: {{path: {tmp_path / 'spool.db'}}}\n")
    assert main(["notify", "--no-kafka", "--config", str(bare)]) == 2
    assert "expected notify.alertmanager_webhook" in capsys.readouterr().err
    with am_server.listen("127.0.0.1", 0) as taken:
        port = taken.getsockname()[1]
        cfg = tmp_path / "taken.yaml"
        cfg.write_text(f"spool: {{path: {tmp_path / 'spool.db'}}}\nnotify: {{alertmanager_webhook: {{port: {port}}}}}\n")
        assert main(["notify", "--no-kafka", "--config", str(cfg)]) == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
