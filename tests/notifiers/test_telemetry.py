"""The notifier's Prometheus series, read back through prometheus-client's text exposition as a
scrape would: counts match what the fake platforms saw, on simulated time."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.telemetry import WorkerCounts
from gpuwarden.notifiers.worker import Stats
from tests.fakes.alerts import note
from tests.fakes.http import FakeDingTalk, FakeSlack


def scraped(d: Delivery) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) → value, parsed from the exposition text."""
    text = generate_latest(d.metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_retries_outcomes_and_queue_of_a_receiver_that_answers_429_then_recovers(monkeypatch, clock, spool):
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SLACK_URL", fake.base + fake.path)
        fake.script.append((429, {"Retry-After": "7"}, b"rate_limited"))
        fake.down_until = clock() + 100  # then 503s for 100 s: the next one is queued
        fake.script.append((200, {}, b"ok"))
        d = Delivery([Receiver(name="sl", slack={"url": {"env": "SLACK_URL"}})], spool=spool,
                     clock=clock, sleep=clock.sleep, rng=lambda: 0.0, max_attempts=2)
        try:
            before = scraped(d)
            first = await d.deliver(note("sl", 1))  # 429, then 200 from the script
            second = await d.deliver(note("sl", 2))  # 503 twice: down, queued
            d.drain()
            await clock.sleep(30)
            mid = scraped(d)
            await d.wait_idle()
            d.drain()
            after = scraped(d)
        finally:
            await d.aclose()
    assert (first.status, second.status) == ("delivered", "spooled")
    sl = (("receiver", "sl"),)
    # Every series of a configured receiver exists from the start, at 0.
    assert before[("gpuwarden_notify_retries_total", sl)] == 0
    assert before[("gpuwarden_notify_queue_depth", sl)] == 0
    assert before[("gpuwarden_notify_deliveries_total", (("outcome", "failed"), *sl))] == 0
    assert mid[("gpuwarden_notify_queue_depth", sl)] == 1
    assert mid[("gpuwarden_notify_oldest_queued_age_seconds", sl)] >= 30
    retried = sum(1 for q in fake.requests if q.answer[0] in (429, 503))
    assert after[("gpuwarden_notify_retries_total", sl)] == retried >= 3
    assert after[("gpuwarden_notify_deliveries_total", (("outcome", "delivered"), *sl))] == 2
    assert after[("gpuwarden_notify_deliveries_total", (("outcome", "spooled"), *sl))] == 1
    assert after[("gpuwarden_notify_queue_depth", sl)] == 0
    assert after[("gpuwarden_notify_oldest_queued_age_seconds", sl)] == 0


async def test_rate_limit_waits_are_counted_with_their_seconds(monkeypatch, clock, spool):
    with FakeDingTalk(clock, secret="SECdingtalk-signing-secret") as fake:
        monkeypatch.setenv("DT_URL", f"{fake.base}/robot/send?access_token={fake.token}")
        monkeypatch.setenv("DT_SECRET", "SECdingtalk-signing-secret")
        r = Receiver(name="dt", dingtalk={"url": {"env": "DT_URL"}, "secret": {"env": "DT_SECRET"}})
        d = Delivery([r], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            for i in range(60):  # 2 a second against DingTalk's 20 a minute: the worker waits for slots
                await d.deliver(note("dt", i))
                await clock.sleep(0.5)
            await d.wait_idle()
            got = scraped(d)
        finally:
            await d.aclose()
    dt = (("receiver", "dt"),)
    assert got[("gpuwarden_notify_rate_limit_waits_total", dt)] >= 1
    assert got[("gpuwarden_notify_rate_limit_wait_seconds_total", dt)] > 0
    assert "SECdingtalk" not in generate_latest(d.metrics.registry).decode()  # no secret in any label


def test_worker_counts_are_counters_read_when_scraped() -> None:
    stats = Stats()
    d = Delivery([], spool=None)
    d.metrics.registry.register(WorkerCounts(stats))
    stats.consumed, stats.dead_letters = 7, 2
    text = generate_latest(d.metrics.registry).decode()
    assert "# TYPE gpuwarden_notify_consumed_total counter" in text
    assert "gpuwarden_notify_consumed_total 7.0" in text and "gpuwarden_notify_dead_letters_total 2.0" in text
