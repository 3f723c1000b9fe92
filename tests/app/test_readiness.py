"""``/-/healthy`` (alive) and ``/-/ready`` (doing its job) over real HTTP on loopback, for each
process kind (#32, point 3): the agent with a real spool and a real publisher whose broker does not
answer, a stream worker's :class:`StreamMetrics` fed as the runtime feeds it (``refresh`` every
round, ``fetched`` every batch), and the notifier's routes against its delivery's failing receivers.
Clocks are injected so "over 30 s" and "over 60 s" take no wall time."""

from __future__ import annotations

import asyncio
import logging
import socket
import urllib.error
import urllib.request
from collections import namedtuple
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.contract import Topics
from gpuwarden.exposition import serve
from gpuwarden.notifiers.config import NotifyConfig
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.telemetry import notifier_ready, unready_routes
from gpuwarden.producers.events import KmsgWatcher
from gpuwarden.producers.metrics import COUNTERS, AgentMetrics
from gpuwarden.producers.publisher import STALLED_S, Publisher
from gpuwarden.producers.simulator import Simulator
from gpuwarden.spool import Spool
from gpuwarden.streams.telemetry import StreamMetrics

from tests.hang import HANG_S

TP = namedtuple("TP", "topic partition")  # aiokafka's TopicPartition has these two fields


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=HANG_S) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_ready_without_a_check_and_a_failing_check_is_not_ready():
    port = free_port()
    plain = serve(AgentMetrics().registry, port)
    try:
        assert get(port, "/-/healthy") == (200, "ok\n")
        assert get(port, "/-/ready") == (200, "ready\n")
    finally:
        plain.shutdown()

    def broken() -> str | None:
        raise RuntimeError("secret-looking detail")

    port = free_port()
    server = serve(AgentMetrics().registry, port, ready=broken)
    try:
        status, body = get(port, "/-/ready")
        assert status == 503 and "RuntimeError" in body and "secret-looking" not in body
        assert get(port, "/-/healthy")[0] == 200  # alive all the same
    finally:
        server.shutdown()


def test_an_agent_cut_off_from_kafka_is_alive_but_not_ready_after_30_s(tmp_path):
    """Records wait in the spool, the broker refuses connections: ``/metrics`` has the backlog, the
    oldest record's age and the errors by cause; ``/-/ready`` turns 503 once nothing was published
    for over 30 s, and back when the spool drains."""
    closed = free_port()  # nothing listens there
    spool = Spool(tmp_path / "spool.db")
    pub = Publisher(spool, f"127.0.0.1:{closed}", Topics("ready."), send_timeout_s=1.0)
    clock = Clock(pub.caught_up_at)
    pub.clock = clock
    metrics = AgentMetrics()
    metrics.publishing(pub)
    sim = Simulator("healthy", nodes=1, gpus=2, start_ts=clock.t - 20, tick_s=10.0)
    pub.submit(sim.step())
    pub.submit(sim.step())
    waiting = spool.pending_count(pub.topics.all())
    assert waiting > 0
    assert asyncio.run(pub.pump()) == 0  # the broker is not there
    port = free_port()
    server = serve(metrics.registry, port, bare_counters=COUNTERS, ready=metrics.ready)
    try:
        assert get(port, "/-/ready")[0] == 200  # within the grace
        clock.t += STALLED_S + 1
        status, body = get(port, "/-/ready")
        assert status == 503, body
        assert f"{waiting} records wait in the spool" in body and "last error: connection" in body, body
        assert get(port, "/-/healthy")[0] == 200
        m = samples(get(port, "/metrics")[1])
        assert m["gpuwarden_agent_spool_pending_records", ()] == waiting
        assert m["gpuwarden_agent_spool_oldest_age_seconds", ()] >= STALLED_S + 20
        errors = {dict(k[1])["cause"]: v for k, v in m.items() if k[0] == "gpuwarden_agent_publish_errors_total"}
        assert errors["connection"] >= 1 and sum(errors.values()) == pub.failures
        # the spool drained (as a published batch leaves it): ready again
        spool.mark_published(r.id for r in spool.pending(pub.topics.all(), limit=10_000))
        assert asyncio.run(pub.pump()) == 0
        assert get(port, "/-/ready") == (200, "ready\n")
        assert samples(get(port, "/metrics")[1])["gpuwarden_agent_spool_pending_records", ()] == 0
    finally:
        server.shutdown()
        asyncio.run(pub.close())
        spool.close()


def test_an_agent_without_the_kernel_log_says_kmsg_unavailable(tmp_path, caplog):
    """The start log and ``/metrics`` both say it (a DaemonSet without agent.kmsg.privileged)."""
    watcher = KmsgWatcher(lambda ev: None, str(tmp_path / "no-kmsg"))
    with caplog.at_level(logging.WARNING):
        assert not watcher.start()
    assert "kmsg: unavailable" in caplog.text
    metrics = AgentMetrics()
    metrics.kmsg(False)
    port = free_port()
    server = serve(metrics.registry, port)
    try:
        assert samples(get(port, "/metrics")[1])["gpuwarden_agent_kmsg_available", ()] == 0
    finally:
        server.shutdown()


def test_a_stream_worker_is_not_ready_while_an_input_is_behind_and_still_for_60_s():
    clock = Clock(1000.0)
    m = StreamMetrics(clock=clock)
    port = free_port()
    server = serve(m.registry, port, ready=m.ready)
    try:
        m.refresh({TP("gpu.samples", 0): 0, TP("gpu.events", 0): 0}, [], _Unsent())
        clock.t += 600  # caught up for ten minutes: ready
        m.refresh({TP("gpu.samples", 0): 0, TP("gpu.events", 0): 0}, [], _Unsent())
        assert get(port, "/-/ready")[0] == 200
        clock.t += 1
        m.refresh({TP("gpu.samples", 0): 500, TP("gpu.samples", 1): 20, TP("gpu.events", 0): 0}, [], _Unsent())
        clock.t += 59  # behind, moving within the minute
        assert get(port, "/-/ready")[0] == 200
        m.fetched({"gpu.samples": [object()] * 10, "gpu.events": []})
        clock.t += 59
        assert get(port, "/-/ready")[0] == 200
        clock.t += 2  # 61 s since records of gpu.samples were applied, lag still > 0
        status, body = get(port, "/-/ready")
        assert status == 503 and "gpu.samples (lag 520" in body and "gpu.events" not in body, body
        assert get(port, "/-/healthy")[0] == 200
        m.fetched({"gpu.samples": [object()]})
        assert get(port, "/-/ready")[0] == 200
        clock.t += 120  # a stalled loop (no refresh, no batch): its last lag ages out
        assert get(port, "/-/ready")[0] == 503
        m.refresh({TP("gpu.samples", 0): 0, TP("gpu.samples", 1): 0}, [], _Unsent())
        assert get(port, "/-/ready")[0] == 200  # caught up
    finally:
        server.shutdown()


class _Unsent:
    count = 0


@pytest.fixture
def hooks(monkeypatch):
    for n in ("PAGER", "SMS", "CHAT"):
        monkeypatch.setenv(f"READY_HOOK_{n}", f"http://127.0.0.1:9/{n.lower()}")


NOTIFY = {
    "receivers": [
        {"name": "pager", "webhook": {"url": {"env": "READY_HOOK_PAGER"}}, "fallback": ["pager-sms"]},
        {"name": "pager-sms", "webhook": {"url": {"env": "READY_HOOK_SMS"}}},
        {"name": "chat", "webhook": {"url": {"env": "READY_HOOK_CHAT"}}},
    ],
    "team": "chat",
    "owners": {"default": "chat"},
    "escalation": [{"receivers": ["pager"]}],
}


def test_the_notifier_is_not_ready_while_every_receiver_of_a_route_fails(hooks):
    """The default tree: critical to @oncall (pager, its fallback pager-sms) and @team (chat); the
    rest to @owner (chat). One route failing is enough, a fallback that answers is not failing."""
    config = NotifyConfig.model_validate(NOTIFY)
    assert unready_routes(config, frozenset()) == []
    assert unready_routes(config, frozenset({"pager"})) == []  # pager-sms and chat still answer
    assert unready_routes(config, frozenset({"pager", "pager-sms"})) == []  # chat answers critical too
    assert unready_routes(config, frozenset({"chat"})) == ["route (chat)"]  # @owner's only receiver
    assert unready_routes(config, frozenset({"pager", "pager-sms", "chat"})) == \
        ["route (chat)", "route.routes[0] (chat, pager, pager-sms)"]
    explicit = NotifyConfig.model_validate({**NOTIFY, "route": {"receivers": [], "routes": [
        {"matchers": ["tier=critical"], "receivers": ["pager"]}]}})
    assert unready_routes(explicit, frozenset({"chat"})) == []  # the root records only
    assert unready_routes(explicit, frozenset({"pager", "pager-sms"})) == ["route.routes[0] (pager, pager-sms)"]


def test_a_route_s_receivers_for_readiness_are_those_the_router_resolves(hooks):
    """Readiness asks :meth:`NotifyConfig.reach`, as the router resolves: ``@team`` among the first
    level's receivers is reached by ``@oncall``, and an alert of no known owner goes to the team
    when there is no ``owners.default``, so a route is failing only when those fail too."""
    oncall = NotifyConfig.model_validate({**NOTIFY, "escalation": [{"receivers": ["pager", "@team"]}],
                                          "route": {"receivers": ["@oncall"]}})
    assert unready_routes(oncall, frozenset({"pager", "pager-sms"})) == []  # chat answers
    assert unready_routes(oncall, frozenset({"pager", "pager-sms", "chat"})) == ["route (chat, pager, pager-sms)"]
    owner = NotifyConfig.model_validate({**NOTIFY, "owners": {"users": {"ann": "pager"}},
                                         "route": {"receivers": ["@owner"]}})
    assert unready_routes(owner, frozenset({"pager", "pager-sms"})) == []  # everyone but ann: chat
    assert unready_routes(owner, frozenset({"pager", "pager-sms", "chat"})) == ["route (chat, pager, pager-sms)"]


async def test_the_notifier_check_reads_the_delivery_s_failing_receivers(hooks):
    config = NotifyConfig.model_validate(NOTIFY)
    delivery = Delivery(config.receivers, spool=None)
    try:
        ready = notifier_ready(config, delivery)
        assert ready() is None
        delivery._failed("chat", 1, None)  # a send to chat failed: it backs off, @owner has no other
        assert ready() == "every receiver failing on route (chat)"
        delivery._recovered("chat")
        assert ready() is None
    finally:
        await delivery.aclose()


def test_systemd_s_watchdog_is_fed_while_healthy_and_status_says_why_not_ready(tmp_path, monkeypatch):
    """A unit with WatchdogSec: the process pings WATCHDOG=1 while its /-/healthy answers, and puts
    /-/ready's answer in STATUS= (a not-ready worker is not restarted in a loop, it says why)."""
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(HANG_S)  # returns on the datagram: only a hang fails it
    monkeypatch.setenv("NOTIFY_SOCKET", path)
    monkeypatch.setenv("WATCHDOG_USEC", "200000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    why: list[str] = []
    port = free_port()
    server = serve(AgentMetrics().registry, port, bind="0.0.0.0", ready=lambda: why[0] if why else None)
    try:
        assert sock.recv(4096) == b"READY=1"
        assert sock.recv(4096) == b"WATCHDOG=1\nSTATUS=ready"
        why.append("3 records wait in the spool")
        seen = [sock.recv(4096) for _ in range(3)]
        assert b"WATCHDOG=1\nSTATUS=not ready: 3 records wait in the spool" in seen, seen
    finally:
        server.shutdown()
    sock.settimeout(0.5)
    try:
        while True:  # what was in flight; then nothing: a stopped server feeds no watchdog
            sock.recv(4096)
    except TimeoutError:
        pass
    finally:
        sock.close()


def test_without_a_metrics_port_the_watchdog_is_fed_all_the_same(tmp_path, monkeypatch):
    """A unit with WatchdogSec and a config without the metrics port: pinged (not restarted every
    minute), with a STATUS= that says health is unknown."""
    from gpuwarden.config import MetricsEndpoint
    from gpuwarden.exposition import serve_from

    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(HANG_S)  # returns on the datagram: only a hang fails it
        monkeypatch.setenv("NOTIFY_SOCKET", path)
        monkeypatch.setenv("WATCHDOG_USEC", "100000")
        monkeypatch.delenv("WATCHDOG_PID", raising=False)
        assert serve_from(AgentMetrics().registry, MetricsEndpoint()) is None
        assert sock.recv(4096) == b"READY=1"
        assert sock.recv(4096) == b"WATCHDOG=1\nSTATUS=no metrics port: health unknown"
        monkeypatch.setenv("WATCHDOG_PID", "1")  # another process's watchdog: not ours to feed
        from gpuwarden import watchdog

        assert watchdog.alive_only() is None


def test_gpuwarden_agent_cut_off_from_kafka_turns_unready_through_the_cli(tmp_path):
    """The wiring, end to end: ``gpuwarden agent --simulate`` (live) with a broker that is not
    there; ``/metrics`` shows the spool growing and the errors by cause at once, ``/-/ready``
    turns 503 past 30 s, ``/-/healthy`` stays 200. (35 s of wall time on a quiet machine.)"""
    import subprocess
    import sys
    import time

    port, closed = free_port(), free_port()
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(f"kafka:\n  bootstrap: 127.0.0.1:{closed}\nspool:\n  path: {tmp_path / 'spool.db'}\n"
                   f"agent:\n  metrics_port: {port}\n  publish_timeout: 2s\n  socket_path: {tmp_path / 'sdk.sock'}\n")
    p = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(cfg), "--simulate",
                          "healthy", "--nodes", "1", "--gpus", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    launched = time.monotonic()

    def until(ready: Callable[[], object]) -> object:
        """Wait on the event itself while the agent runs; the bound only catches a hang (#33: the
        limits of 30 s to start and 40 s to turn unready failed on a busy machine)."""
        while not (got := ready()):
            assert p.poll() is None, p.stderr.read()
            assert time.monotonic() - launched < HANG_S, "a hang"
            time.sleep(0.2)
        return got

    def answer(path: str) -> tuple[int, str] | None:
        try:
            return get(port, path)
        except OSError:  # not listening yet
            return None

    try:
        status = until(lambda: answer("/-/ready"))
        # ready within the grace: unready only once STALLED_S passed since the agent started
        assert status[0] == 200 or time.monotonic() - launched > STALLED_S, status

        def sending_fails() -> dict | None:
            m = samples(get(port, "/metrics")[1])
            errors = sum(v for k, v in m.items() if k[0] == "gpuwarden_agent_publish_errors_total")
            return m if m["gpuwarden_agent_spool_pending_records", ()] > 0 and errors >= 1 else None

        until(sending_fails)
        status = until(lambda: (s := get(port, "/-/ready"))[0] != 200 and s)
        assert status[0] == 503 and "records wait in the spool" in status[1], status
        assert get(port, "/-/healthy")[0] == 200
    finally:
        p.terminate()
        p.wait(timeout=HANG_S)
