"""The notifier's Prometheus metrics: what was delivered where, what waits, what was retried.

:class:`DeliveryMetrics` is fed by :class:`gpuwarden.notifiers.delivery.Delivery` on the event
loop; the worker's own counts (alert records read, dead letters, stale records, alerts from
Alertmanager's webhook) are read from its ``Stats`` at scrape time by :class:`WorkerCounts`.
Receiver names are the only labels: they come from the config, never from a secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class DeliveryMetrics:
    """Per receiver: outcomes, retries, rate-limit waits, queue depth and the oldest queued age."""

    def __init__(self, clock: Callable[[], float] = time.time, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.clock = clock
        r = self.registry
        self.deliveries = Counter("gpuwarden_notify_deliveries", "notifications by receiver and outcome "
                                  "(delivered, spooled: queued to send later, fallback, failed)",
                                  ("receiver", "outcome"), registry=r)
        self.retries = Counter("gpuwarden_notify_retries", "sends answered 'try again' (5xx, timeout, rate "
                               "limited by the platform)", ("receiver",), registry=r)
        self.waits = Counter("gpuwarden_notify_rate_limit_waits", "times a send waited for the receiver's "
                             "rate limit", ("receiver",), registry=r)
        self.waited = Counter("gpuwarden_notify_rate_limit_wait_seconds", "seconds sends waited for the "
                              "receiver's rate limit", ("receiver",), registry=r)
        self.queued = Gauge("gpuwarden_notify_queue_depth", "notifications in the receiver's outbox",
                            ("receiver",), registry=r)
        self.oldest = Gauge("gpuwarden_notify_oldest_queued_age_seconds", "age of the oldest notification in "
                            "the receiver's outbox (0 when empty)", ("receiver",), registry=r)
        self.refused = Gauge("gpuwarden_notify_receiver_refusing", "1 while the receiver refuses our credentials "
                             "(signature or token; the meta alert is open), else 0", ("receiver",), registry=r)
        self._oldest_at: dict[str, float] = {}

    def known(self, receiver: str, outcomes: Iterable[str]) -> None:
        """Start ``receiver``'s series at 0, so a dashboard or rule sees them before the first event."""
        for counter in (self.retries, self.waits, self.waited):
            counter.labels(receiver)
        for status in outcomes:
            self.deliveries.labels(receiver, status)
        self.queue(receiver, 0, None)

    def outcome(self, receiver: str, status: str) -> None:
        self.deliveries.labels(receiver, status).inc()

    def refusing(self, receiver: str, refusing: bool) -> None:
        self.refused.labels(receiver).set(1 if refusing else 0)

    def retry(self, receiver: str) -> None:
        self.retries.labels(receiver).inc()

    def rate_limited(self, receiver: str, seconds: float) -> None:
        self.waits.labels(receiver).inc()
        self.waited.labels(receiver).inc(seconds)

    def queue(self, receiver: str, depth: int, oldest_at: float | None) -> None:
        """The outbox of ``receiver`` as it stands: its depth and when its oldest entry was queued."""
        self.queued.labels(receiver).set(depth)
        if oldest_at is None:
            self._oldest_at.pop(receiver, None)
        else:
            self._oldest_at[receiver] = oldest_at
        self.oldest.labels(receiver).set_function(lambda: self._age(receiver))

    def _age(self, receiver: str) -> float:
        at = self._oldest_at.get(receiver)
        return 0.0 if at is None else max(0.0, self.clock() - at)


class WorkerCounts(Collector):
    """The notify worker's ``Stats`` as counters, read when scraped (plain ints: safe from the HTTP thread)."""

    FIELDS = {"consumed": "alert records read from Kafka",
              "dead_letters": "alert records that broke the contract (sent to alerts.dlq)",
              "stale": "alert records older than notify.max_backlog, skipped",
              "from_alertmanager": "alerts accepted from Alertmanager's webhook"}

    def __init__(self, stats: Any) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        for field, doc in self.FIELDS.items():
            yield CounterMetricFamily(f"gpuwarden_notify_{field}", doc, value=getattr(self.stats, field))


def unready_routes(config: Any, down: frozenset[str]) -> list[str]:
    """The routes of ``config`` (a :class:`gpuwarden.notifiers.config.NotifyConfig`) whose every
    receiver is in ``down``, fallbacks included, as ``route.routes[0] (pager, pager-sms)``: the
    notifier is not ready (``/-/ready``) while one is. A route's receivers are those its tokens may
    reach (``NotifyConfig.reach``); a route naming none (record only) is never failing."""
    if not down:
        return []
    failing = []

    def walk(route: Any, where: str) -> None:
        if route.receivers:
            names = config.reach(route.receivers)
            if names and names <= down:
                failing.append(f"{where} ({', '.join(sorted(names))})")
        for i, child in enumerate(route.routes):
            walk(child, f"{where}.routes[{i}]")

    walk(config.routing_tree(), "route")
    return failing


def notifier_ready(config: Any, delivery: Any) -> Callable[[], str | None]:
    """The notifier's ``/-/ready`` check: not ready while every receiver of a route is failing."""

    def ready() -> str | None:
        failing = unready_routes(config, delivery.down())
        return f"every receiver failing on {'; '.join(failing)}" if failing else None

    return ready
