"""gpuwarden next to a real Prometheus Alertmanager (Debian's package, on loopback), both ways.

1. Alertmanager → gpuwarden: Alertmanager's own webhook receiver (bearer token from a
   file) posts to ``gpuwarden notify --no-kafka``; the alert arrives signed at the loopback
   Feishu and DingTalk (tests/acceptance/platforms.py checks the signatures), in Chinese where
   the receiver says zh-CN, then its resolve does; both are recorded in the spool.
2. gpuwarden → Alertmanager: the ``alertmanager`` receiver posts to ``/api/v2/alerts``;
   ``amtool alert query`` shows the alert, then (resolved) no longer does, and Alertmanager's own
   webhook notifies its resolution. The ``webhook`` receiver pointed at the same API is refused
   as the issue reported (HTTP 400, ``cannot unmarshal object``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from gpuwarden.contract import AlertState, AlertTransition, Tier, decode
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.spool import Spool
from tests.acceptance.platforms import DingTalk, Feishu, Hit, Platform, _json
from tests.alertmanager_support import LocalAlertmanager, amtool
from tests.hang import HANG_S

pytestmark = pytest.mark.alertmanager

FS_SECRET, DT_SECRET = "feishu-sign-secret", "SECdingtalk-sign-secret"
TOKEN = "am-to-gpuwarden-token-5f2c"


def wait_for(cond: Callable[[], object], timeout_s: float = HANG_S) -> bool:
    """True once ``cond()`` holds; ``timeout_s`` only catches a hang (returns at the event)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return bool(cond())


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat().replace("+00:00", "Z")


def post_to_alertmanager(url: str, alerts: list[dict]) -> None:
    """What Prometheus does: a PostableAlerts array to the API."""
    req = urllib.request.Request(url + "/api/v2/alerts", data=json.dumps(alerts).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


class Recorder(Platform):
    """Where Alertmanager's own webhook receiver posts in part 2: takes everything."""

    def answer(self, hit: Hit) -> tuple[int, dict[str, str], bytes]:
        return _json(200, {})


def _start_notify(tmp: Path, config: dict, env: dict[str, str]) -> tuple[subprocess.Popen, Path, str]:
    """``gpuwarden notify --no-kafka`` as a user runs it; the webhook's URL from what it prints."""
    path = tmp / "gpuwarden.yaml"
    path.write_text(yaml.safe_dump(config))
    err = tmp / "notify.stderr"
    with open(err, "w") as fh:  # a file, not a pipe: a full pipe would block the process
        proc = subprocess.Popen([sys.executable, "-c", "import sys; from gpuwarden.app.cli import main; sys.exit(main())",
                                 "notify", "--no-kafka", "--config", str(path)],
                                env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=fh)
    marker = "Alertmanager webhook at "
    if not wait_for(lambda: marker in err.read_text() or proc.poll() is not None) or proc.poll() is not None:
        proc.kill()
        pytest.fail(f"gpuwarden notify --no-kafka did not start: {err.read_text()[-2000:]}")
    url = err.read_text().split(marker, 1)[1].split()[0]
    return proc, err, url


def test_alertmanager_posts_to_gpuwarden_and_the_alert_arrives_signed_at_feishu_and_dingtalk(
        alertmanager: LocalAlertmanager, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    with Feishu(FS_SECRET) as fs, DingTalk(DT_SECRET) as dt:
        env = {"URL_FS": fs.url, "FS_SECRET": FS_SECRET, "URL_DT": dt.url, "DT_SECRET": DT_SECRET}
        config = {
            "spool": {"path": str(tmp_path / "spool.db")},
            "notify": {
                "alertmanager_webhook": {"port": 0, "token": {"file": str(token)}},
                "receivers": [
                    {"name": "team-feishu", "language": "zh-CN",
                     "feishu": {"url": {"env": "URL_FS"}, "secret": {"env": "FS_SECRET"}}},
                    {"name": "lead-dingtalk", "dingtalk": {"url": {"env": "URL_DT"}, "secret": {"env": "DT_SECRET"}}}],
                "route": {"receivers": ["team-feishu", "lead-dingtalk"], "group_by": ["..."], "group_wait": "0s",
                          "group_interval": "1s", "repeat_interval": "1h"}}}
        proc, err, hook = _start_notify(tmp_path, config, env)
        try:
            am = alertmanager.start(hook, token_file=token)
            started = time.time() - 60
            alert = {"labels": {"alertname": "GpuXid79", "severity": "critical", "node": "gpu-07", "gpu": "3"},
                     "annotations": {"summary": "GPU 3 on gpu-07 fell off the bus",
                                     "runbook_url": "https://runbooks.example.org/xid79"},
                     "startsAt": rfc3339(started), "generatorURL": "http://prometheus.example.org:9090/graph"}
            post_to_alertmanager(am, [alert])
            assert wait_for(lambda: fs.accepted and dt.accepted), (fs.hits, dt.hits, err.read_text()[-2000:])
            feishu_card = json.dumps(fs.accepted[0].json, ensure_ascii=False)
            assert "GPU 3 on gpu-07 fell off the bus" in feishu_card and "严重" in feishu_card  # zh-CN frame
            assert "GPU 3 on gpu-07 fell off the bus" in dt.accepted[0].json["markdown"]["text"]
            assert "CRITICAL" in dt.accepted[0].json["markdown"]["title"]

            post_to_alertmanager(am, [{**alert, "endsAt": rfc3339(time.time())}])
            assert wait_for(lambda: len(fs.accepted) >= 2 and len(dt.accepted) >= 2), err.read_text()[-2000:]
            assert "已恢复" in json.dumps(fs.accepted[-1].json, ensure_ascii=False)
            assert "resolved" in dt.accepted[-1].json["markdown"]["title"]
            assert not [h for h in fs.hits + dt.hits if not h.ok]  # every request signed right, fresh
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)
        assert proc.returncode == 0, err.read_text()[-2000:]
        assert "2 alerts from Alertmanager's webhook" in err.read_text()
    with Spool(tmp_path / "spool.db") as spool:
        recorded = [decode(r.value, AlertTransition) for r in spool.read("alerts")]
    assert [(t.rule, t.state, t.tier) for t in recorded] == [("GpuXid79", AlertState.FIRING, Tier.CRITICAL),
                                                            ("GpuXid79", AlertState.RESOLVED, Tier.CRITICAL)]
    assert recorded[0].fingerprint == recorded[1].fingerprint and recorded[0].fingerprint.startswith("am-")
    assert TOKEN not in err.read_text()


def _transition(state: AlertState, started: float, ended: float | None) -> AlertTransition:
    return AlertTransition(fingerprint="3f2a9c1b0d4e5f60aa", rule="gpu_mem_leak", tier=Tier.ATTENTION, state=state,
                           labels={"node": "gpu-07", "gpu": "3", "task.class": "llama-train", "user": ""},
                           started_at=started, ended_at=ended, ts=ended or started,
                           summary="GPU memory grows steadily on gpu-07/gpu3",
                           action="Check the training loop for tensors kept across steps.")


async def test_the_alertmanager_receiver_posts_and_amtool_shows_the_alert_then_its_resolution(
        alertmanager: LocalAlertmanager, monkeypatch: pytest.MonkeyPatch) -> None:
    with Recorder() as am_webhook:
        am = alertmanager.start(am_webhook.base + "/hook")
        receivers = [Receiver(name="am", alertmanager={"url": am}),
                     Receiver(name="old-way", webhook={"url": {"env": "OLD_WAY_URL"}})]
        monkeypatch.setenv("OLD_WAY_URL", am + "/api/v2/alerts")
        delivery = Delivery(receivers, spool=None, language="en", timezone="UTC", max_attempts=1)
        started = time.time() - 600
        try:
            firing = _transition(AlertState.FIRING, started, None)
            old = await delivery.deliver(Notification("old-way", "g", [firing], "new", time.time(), id="old-1"))
            assert old.status == "failed" and "cannot unmarshal object" in old.detail  # the issue, as reported

            sent = await delivery.deliver(Notification("am", "g", [firing], "new", time.time(), id="n-1"))
            assert sent.status == "delivered", sent.detail
            [shown] = amtool(am, "alert", "query", "alertname=gpu_mem_leak")
            assert shown["labels"] == {"alertname": "gpu_mem_leak", "severity": "warning", "node": "gpu-07",
                                       "gpu": "3", "task_class": "llama-train"}
            assert shown["annotations"]["summary"] == "GPU memory grows steadily on gpu-07/gpu3"
            assert shown["annotations"]["gpuwarden_fingerprint"] == "3f2a9c1b0d4e5f60aa"
            assert shown["status"]["state"] == "active"
            assert datetime.fromisoformat(shown["startsAt"]).timestamp() == pytest.approx(started, abs=0.01)
            assert datetime.fromisoformat(shown["endsAt"]).timestamp() > time.time() + 4 * 3600  # firing_ttl 5h

            resolved = _transition(AlertState.RESOLVED, started, time.time())
            closed = await delivery.deliver(Notification("am", "g", [resolved], "resolved", time.time(), id="n-2"))
            assert closed.status == "delivered", closed.detail
            assert amtool(am, "alert", "query", "alertname=gpu_mem_leak") in ([], None)
        finally:
            await delivery.aclose()
        # Alertmanager itself saw it fire and end: its webhook says so, in that order.
        assert wait_for(lambda: any(h.json["status"] == "resolved" for h in am_webhook.hits)), am_webhook.hits
        states = [h.json["alerts"][0]["status"] for h in am_webhook.hits]
        assert states[0] == "firing" and states[-1] == "resolved"
