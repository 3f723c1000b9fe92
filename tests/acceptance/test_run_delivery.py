"""``gpuwarden run`` as a user runs it, against the documented platforms on real wall time.

Every figure here is what the loopback platforms recorded on arrival (wall
clock): windows, signature ages, the time a signal took to end the process.

No limit here is a speed figure that a busy machine could miss (#33): the signal tests hold
deliveries for an hour (Retry-After, ``notify.drain_on_exit``) and bound the exit at ``HANG_S``,
so only a run that waits them out fails; how fast a signal ends a run is measured by
bench/signal_exit.py (docs/benchmarks.md), and the waits for the platforms' first hits are on
those hits with a bound against a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import yaml

from gpuwarden.spool import Spool
from gpuwarden.notifiers.outbox import outbox_topic
from tests.acceptance.platforms import DingTalk, Feishu, PagerDuty, Slack, WeCom, most_in_window

FS_SECRET, DT_SECRET = "feishu-sign-secret", "SECdingtalk-sign-secret"
HANG_S = 120.0  # a run that waits out an hour of Retry-After or drain_on_exit; 0.3-2 s measured (bench/signal_exit.py)
HOLD = (429, {"Content-Type": "text/html", "Retry-After": "3600"}, b"rate_limited")  # Slack: come back in an hour


class Fleet:
    """One of each platform, and a config that sends every alert to all chats and critical to PagerDuty."""

    def __init__(self, stack: ExitStack, tmp: Path) -> None:
        self.slack = stack.enter_context(Slack())
        self.feishu = stack.enter_context(Feishu(FS_SECRET))
        self.dingtalk = stack.enter_context(DingTalk(DT_SECRET))
        self.wecom = stack.enter_context(WeCom())
        self.pd = stack.enter_context(PagerDuty())
        self.tmp = tmp
        self.env = {**os.environ, "URL_SL": self.slack.url, "URL_FS": self.feishu.url, "FS_SECRET": FS_SECRET,
                    "URL_DT": self.dingtalk.url, "DT_SECRET": DT_SECRET, "URL_WC": self.wecom.url,
                    "PD_KEY": self.pd.routing_key}
        chats = ["slack", "feishu", "dingtalk", "wecom"]
        cfg = {"spool": {"path": str(tmp / "spool.db")}, "engine": {"allowed_lateness": "1s"}, "notify": {
            # mixed now carries the scheduler and serving scenarios too: ~35 attention messages for
            # WeCom's 20 a minute, so the queues need up to ~2 min after the run to drain
            "drain_on_exit": "150s",
            "receivers": [
                {"name": "slack", "slack": {"url": {"env": "URL_SL"}}},
                {"name": "feishu", "feishu": {"url": {"env": "URL_FS"}, "secret": {"env": "FS_SECRET"}}},
                {"name": "dingtalk", "dingtalk": {"url": {"env": "URL_DT"}, "secret": {"env": "DT_SECRET"}}},
                {"name": "wecom", "wecom": {"url": {"env": "URL_WC"}}},
                {"name": "pd", "pagerduty": {"routing_key": {"env": "PD_KEY"}, "url": self.pd.url}}],
            # every alert its own group, repeated every 5 min of event time: hundreds of messages
            # in a few seconds of a simulated span, far over every chat's limit
            "route": {"group_by": ["..."], "group_wait": "0s", "group_interval": "1m", "repeat_interval": "5m",
                      "routes": [{"matchers": ["tier=critical"], "receivers": ["pd"], "continue": True},
                                 {"receivers": chats}]}}}
        for r in cfg["notify"]["receivers"]:  # the fleet is simulated: these fakes opt in
            r["accept_simulated"] = True
        self.cfg = cfg  # written by start(): a test may change it first
        self.config = tmp / "gpuwarden.yaml"

    def start(self, *args: str) -> subprocess.Popen:
        cmd = [sys.executable, "-c", "import sys; from gpuwarden.app.cli import main; sys.exit(main())",
               "run", "--config", str(self.config), "--json", *args]
        self.config.write_text(yaml.safe_dump(self.cfg))
        self.stderr = self.tmp / "stderr.txt"
        with open(self.stderr, "w") as err:  # a file, not a pipe: a full pipe would block the process
            return subprocess.Popen(cmd, env=self.env, stdout=subprocess.DEVNULL, stderr=err, text=True)

    def log(self) -> str:
        return self.stderr.read_text()[-3000:]

    def chats(self) -> dict[str, object]:
        return {"slack": self.slack, "feishu": self.feishu, "dingtalk": self.dingtalk, "wecom": self.wecom}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    with ExitStack() as stack:
        yield Fleet(stack, tmp_path)


def wait_for(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def stop_and_time(p: subprocess.Popen, sig: int) -> float:
    """Send ``sig``; seconds until the process exited (killed after ``HANG_S``: a hang)."""
    t = time.monotonic()
    p.send_signal(sig)
    try:
        p.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    return time.monotonic() - t


def test_a_2h_simulated_run_signs_fresh_stays_within_every_limit_and_honours_retry_after(fleet: Fleet) -> None:
    fleet.slack.script.append((429, {"Content-Type": "text/html", "Retry-After": "10"}, b"rate_limited"))
    p = fleet.start("--simulate", "mixed", "--nodes", "2", "--gpus", "8", "--duration", "2h")
    try:
        p.wait(timeout=900)  # ~1-2 min on a quiet box, mostly the queues draining at the chats' limits
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail("gpuwarden run --duration 2h did not end within 900 s of wall time (a hang)")
    assert p.returncode == 0, fleet.log()
    with Spool(fleet.tmp / "spool.db") as spool:  # the run drained its queues before it ended
        left = {name: spool.pending_count(outbox_topic(name)) for name in [*fleet.chats(), "pd"]}
    assert left == dict.fromkeys(left, 0), left
    answers = Counter(h.answer[2][:40] for h in fleet.feishu.hits + fleet.dingtalk.hits)
    assert not [a for a in answers if b"19021" in a or b"310000" in a], answers  # no stale or bad signature
    ages = [h.at - int(h.json["timestamp"]) for h in fleet.feishu.hits]
    ages += [h.at - int(h.query["timestamp"]) / 1000 for h in fleet.dingtalk.hits]
    assert ages and max(ages) < 60  # signed on the wall clock, not the records' (up to 2 h old) time
    for name, platform, limits in [("slack", fleet.slack, [(1, 1.0)]), ("feishu", fleet.feishu, [(5, 1.0), (100, 60.0)]),
                                   ("dingtalk", fleet.dingtalk, [(20, 60.0)]), ("wecom", fleet.wecom, [(20, 60.0)])]:
        times = [h.at for h in platform.hits]
        assert len(platform.accepted) >= 2, name  # it was not starved
        for count, window in limits:
            assert most_in_window(times, window) <= count, (name, count, window)
        refused = [h.answer for h in platform.hits if not h.ok]
        assert refused == ([] if name != "slack" else refused[:1]), (name, refused[:3])
    first, *rest = fleet.slack.hits
    assert first.answer[0] == 429 and rest and rest[0].at - first.at >= 10.0  # Retry-After: 10, honoured
    assert fleet.pd.hits and all(h.ok for h in fleet.pd.hits)


@pytest.mark.parametrize("sig,after_s", [(signal.SIGINT, 3.0), (signal.SIGTERM, 8.0)])
def test_live_run_with_slack_answering_429_exits_on_a_signal_without_waiting_out_retry_after(
        fleet: Fleet, sig: int, after_s: float) -> None:
    """Slack answers 429 with Retry-After: 3600 to everything; pages still go out, and a signal ends
    the run instead of waiting the hour out."""
    fleet.slack.script.extend([HOLD] * 100)
    p = fleet.start("--simulate", "xid-79", "--gpus", "8", "--onset", "0")
    started = time.monotonic()
    try:
        assert wait_for(lambda: len(fleet.pd.accepted) >= 1 and fleet.slack.hits, HANG_S), fleet.log()
        time.sleep(max(0.0, after_s - (time.monotonic() - started)))
        assert p.poll() is None
    finally:
        took = stop_and_time(p, sig)
    assert took < HANG_S, f"still running {took:.1f} s after {signal.Signals(sig).name}: waiting out Retry-After?"
    assert len(fleet.slack.hits) == 1  # one 429, then it waited out Retry-After instead of retrying


def test_a_simulated_run_exits_on_sigterm_while_draining(fleet: Fleet) -> None:
    """After the simulated span, the run drains its queues (up to an hour: Slack held by Retry-After:
    3600); SIGTERM ends it instead."""
    fleet.slack.script.extend([HOLD] * 100)
    fleet.cfg["notify"]["drain_on_exit"] = "1h"
    p = fleet.start("--simulate", "xid-79", "--gpus", "8", "--onset", "60", "--duration", "30m")
    try:
        assert wait_for(lambda: bool(fleet.slack.hits) and len(fleet.pd.accepted) >= 2, HANG_S), fleet.log()
        time.sleep(2.0)
        assert p.poll() is None  # still waiting for Slack's Retry-After, within notify.drain_on_exit
    finally:
        took = stop_and_time(p, signal.SIGTERM)
    assert took < HANG_S, f"still running {took:.1f} s after SIGTERM: waiting out the drain?"
