"""``gpuwarden notify``: alerts from Kafka through the Notifier; ``gpuwarden test-notify``.

Offsets of ``alerts`` are committed after the transitions are handled
(at-least-once); the router drops repeats by fingerprint + state + started_at,
so a redelivery after a rebalance does not notify twice. The ``control`` topic
is read from its beginning by every worker (no consumer group): it is small and
compacted, and each worker needs all of it. A record that breaks the contract
goes to ``alerts.dlq`` with the reason and the worker carries on.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import sys
import time
from dataclasses import replace

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord
from aiokafka.errors import KafkaError

from gpuwarden.contract import AlertState, AlertTransition, ContractError, Tier, Topics, decode
from gpuwarden.deadletter import UnsentLog, letter
from gpuwarden.exposition import serve_from
from gpuwarden.kafka import ensure_topics, kafka_kwargs, start_client
from gpuwarden.outage import OUTAGE, recovered
from gpuwarden.topics import TopicSpec, data_topics
from gpuwarden.spool import Spool
from gpuwarden.notifiers import am_server
from gpuwarden.notifiers.config import NotifierSettings, NotifyConfig
from gpuwarden.notifiers.control import warn_each
from gpuwarden.notifiers.delivery import CHANNELS, Delivery, reread_on_sighup
from gpuwarden.notifiers.kafka import assign_from_beginning, catch_up, ensure_control_topic, poll
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.outbox import DeliveryLog
from gpuwarden.notifiers.pipeline import Notifier, OnRouted
from gpuwarden.notifiers.telemetry import WorkerCounts, notifier_ready

log = logging.getLogger("gpuwarden.notify")
MIN_WAIT_MS = 5  # a poll never spins: even a past-due timer waits this long for records


#: A dead letter holds a record of up to ``limits.max_record_bytes`` (≤ 8 MiB) in base64.
DLQ_REQUEST_BYTES = 16 << 20
#: After Kafka trouble, how long before (and how long at most) the idle loop asks the broker whether it is back.
PROBE_S = 5.0


class Stats:
    def __init__(self) -> None:
        self.consumed = self.dead_letters = self.stale = self.from_alertmanager = 0
        self.unsent: UnsentLog | None = None  # dead letters the broker refused


async def run_notify(settings: NotifierSettings, *, stop: asyncio.Event, delivery: Delivery | None = None,
                     stats: Stats | None = None, kafka: bool = True, metrics_port: int | None = None,
                     on_routed: OnRouted | None = None) -> Stats:
    """Consume until ``stop`` is set, and serve Alertmanager's webhook when ``notify.alertmanager_webhook``
    is set; ``kafka=False``: the webhook only. ``delivery`` may be injected (tests, benchmarks).
    Prometheus metrics on ``metrics_port`` (else ``notify.metrics_port``) when one is set."""
    stats = stats or Stats()
    spool = Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)
    notifier = Notifier(settings, spool=spool, delivery=delivery, record_history=False, on_routed=on_routed)
    hangup = reread_on_sighup(notifier.delivery.reread_secrets)
    registry = notifier.delivery.metrics.registry
    registry.register(WorkerCounts(stats))
    exposed = None
    webhook = settings.notify.alertmanager_webhook
    sock: socket.socket | None = None
    served: asyncio.Task[None] | None = None
    try:
        exposed = serve_from(registry, settings.notify, metrics_port,
                             ready=notifier_ready(settings.notify, notifier.delivery))
        if webhook is not None:
            sock = am_server.listen(webhook.bind, webhook.port)  # before Kafka: a taken port fails at once
            print(f"gpuwarden notify: Alertmanager webhook at {am_server.webhook_url(sock)}", file=sys.stderr,
                  flush=True)
            served = asyncio.create_task(am_server.serve(sock, am_server.app(webhook, _sink(notifier, stats)), stop))
            served.add_done_callback(lambda _: stop.set())  # a server that fails ends the worker, said loudly
        await (_consume(settings, notifier, stats, stop) if kafka else _tick_until(notifier, stop))
    finally:
        stop.set()
        if served is not None:
            await served
        if sock is not None:
            sock.close()
        await notifier.aclose()
        spool.close()
        if exposed is not None:
            exposed.shutdown()
        if hangup:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
    return stats


def _sink(notifier: Notifier, stats: Stats) -> am_server.Sink:
    """Alertmanager's alerts, recorded in the spool like gpuwarden's own, then routed at once."""

    async def accept(accepted: list[AlertTransition]) -> None:
        for t in accepted:
            notifier.record(t)
            await notifier.handle(t)
        stats.from_alertmanager += len(accepted)
        await notifier.tick()  # a group_wait of 0 flushes now, not at the next tick
        notifier.save_state()

    return accept


async def _tick_until(notifier: Notifier, stop: asyncio.Event) -> None:
    """Timers only (no Kafka): group flushes, repeats, escalation, the spool's control records."""
    while not stop.is_set():
        deadline = notifier.next_deadline()
        wait = notifier.config.tick_interval if deadline is None else \
            min(notifier.config.tick_interval, deadline - time.time())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(MIN_WAIT_MS / 1000, wait))
        await notifier.tick()


async def _consume(settings: NotifierSettings, notifier: Notifier, stats: Stats, stop: asyncio.Event) -> None:
    """The ``alerts`` topic (and ``control`` in cluster mode) through ``notifier`` until ``stop`` is set."""
    cfg, topics = settings.notify, Topics(settings.kafka.topic_prefix)
    kw = kafka_kwargs(settings.kafka)
    # The topics first (a consumer's metadata request would let the broker auto-create them); the
    # alerts as the workers' transactions committed them (an aborted attempt is never delivered).
    await ensure_topics(kw, {**data_topics(topics), topics.dlq(topics.alerts): TopicSpec()},
                        partitions=settings.kafka.partitions, replication_factor=settings.kafka.replication_factor)
    alerts = AIOKafkaConsumer(topics.alerts, **kw, group_id=cfg.consumer_group + settings.kafka.topic_prefix,
                              enable_auto_commit=False, auto_offset_reset="earliest",
                              isolation_level="read_committed")
    producer = AIOKafkaProducer(**kw, compression_type="zstd", max_request_size=DLQ_REQUEST_BYTES)
    stats.unsent = UnsentLog(settings.spool.path.parent / "unsent.jsonl")
    control = AIOKafkaConsumer(**kw, enable_auto_commit=False) if cfg.control == "kafka" else None
    await start_client(producer, kw)
    await alerts.start()
    try:
        if control is not None:
            await control.start()
            parts = await ensure_control_topic(settings.kafka)
            await assign_from_beginning(control, parts)
            warn_each(await catch_up(control, parts, notifier.control))  # silences apply from the first alert
        while not stop.is_set():
            if control is not None:
                warn_each(poll(await control.getmany(timeout_ms=0), notifier.control))
            deadline = notifier.next_deadline()
            wait = cfg.tick_interval if deadline is None else min(cfg.tick_interval, deadline - time.time())
            batch = await alerts.getmany(timeout_ms=max(MIN_WAIT_MS, int(wait * 1000)), max_records=500)
            for records in batch.values():
                for r in records:
                    stats.consumed += 1
                    await _one(r, notifier, producer, topics, settings, stats)
            await notifier.tick()
            if batch:
                notifier.save_state()  # the state covers what the committed offsets say was handled
                await alerts.commit()
                recovered("alerts read and committed")
            elif OUTAGE.since is not None and time.monotonic() - OUTAGE.since >= PROBE_S:
                await _probe(alerts)
    finally:
        await alerts.stop()
        if control is not None:
            await control.stop()
        await producer.stop()


async def _probe(alerts: AIOKafkaConsumer) -> None:
    """After Kafka trouble with no alerts coming: ask for the topic's end offsets, so that the
    recovery is logged when the broker answers, not at the next alert."""
    parts = list(alerts.assignment())
    if not parts:  # nothing to ask about (the group not joined yet): no news either way
        return
    try:
        await asyncio.wait_for(alerts.end_offsets(parts), PROBE_S)
    except Exception:  # noqa: BLE001 - still away: its lines are gated (gpuwarden/outage.py)
        return
    recovered("alerts topic reachable")


async def _one(r: ConsumerRecord, notifier: Notifier, producer: AIOKafkaProducer, topics: Topics,
               settings: NotifierSettings,
               stats: Stats) -> None:
    lim = settings.limits
    try:
        t = decode(r.value or b"", AlertTransition, now=time.time(), max_bytes=lim.max_record_bytes,
                   max_future_skew_s=lim.max_future_skew)
    except ContractError as e:
        stats.dead_letters += 1
        log.warning("%s[%d]@%d: %s → %s", r.topic, r.partition, r.offset, e, topics.dlq(r.topic))
        key, dl = letter(r.topic, r.partition, r.offset, r.key, r.value or b"", str(e), lim.max_record_bytes)
        try:
            await producer.send_and_wait(topics.dlq(r.topic), dl, key=key)
        except KafkaError as refused:  # never stop the worker on one record; the broker away still does
            if refused.retriable or stats.unsent is None:
                raise
            stats.unsent.record(topics.dlq(r.topic), key, dl, refused)
        return
    if t.ts < time.time() - settings.notify.max_backlog:
        stats.stale += 1  # e.g. a new consumer group starting at the topic's beginning: history, not news
        return
    await notifier.handle(t)


def cmd_notify(args: argparse.Namespace, settings: NotifierSettings, on_routed: OnRouted | None = None) -> int:
    """Run the notifier worker until SIGINT/SIGTERM; ``--log N`` prints the delivery log instead;
    ``--no-kafka`` serves only Alertmanager's webhook (a bridge for sites without gpuwarden's pipeline).
    ``on_routed``: see :class:`Notifier` (the composition root passes the remediation auto policy)."""
    if getattr(args, "log", None) is not None:
        return _print_log(settings, args.log)
    kafka = not getattr(args, "no_kafka", False)
    if not kafka and (problem := _webhook_only_problem(settings.notify)):
        print(f"gpuwarden notify --no-kafka: {problem}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_main(settings, kafka, getattr(args, "metrics_port", None), on_routed))
    except am_server.ListenError as e:
        print(f"gpuwarden notify: {e.strerror}", file=sys.stderr)
        return 1
    except OSError as e:  # the metrics port taken
        print(f"gpuwarden notify: cannot serve /metrics: {e.strerror or e}", file=sys.stderr)
        return 1


def _webhook_only_problem(cfg: NotifyConfig) -> str | None:
    if cfg.alertmanager_webhook is None:
        return "expected notify.alertmanager_webhook in the config (there is nothing else to serve)"
    if cfg.control == "kafka":
        return "notify.control is kafka: silences and acks live on Kafka; use control: spool"
    return None


async def _main(settings: NotifierSettings, kafka: bool, metrics_port: int | None, on_routed: OnRouted | None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stats = await run_notify(settings, stop=stop, kafka=kafka, metrics_port=metrics_port, on_routed=on_routed)
    print(f"consumed {stats.consumed} alert records, {stats.dead_letters} to the dead-letter topic, "
          f"{stats.stale} older than notify.max_backlog skipped; "
          f"{stats.from_alertmanager} alerts from Alertmanager's webhook",
          file=sys.stderr)
    return 0


def _print_log(settings: NotifierSettings, limit: int) -> int:
    with Spool(settings.spool.path) as spool:
        for e in DeliveryLog(spool).read(limit):
            when = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(e["at"]))
            print(f"{when}  {e['receiver']:<16} {e['status']:<9} attempts={e['attempts']}  "
                  f"{','.join(e['fingerprints'])}  {e['detail']}")
    return 0


def sample_notification(receiver: str, now: float, *, resolved: bool = False) -> Notification:
    """A harmless message that exercises formatting, signing and the receiver's URL (``resolved``: its close)."""
    state = AlertState.RESOLVED if resolved else AlertState.FIRING
    t = AlertTransition(fingerprint="gpuwarden-test", rule="test_notify", tier=Tier.ATTENTION,
                        state=state, labels={"node": "test"}, started_at=now, ts=now,
                        ended_at=now if resolved else None,
                        summary="gpuwarden test message: this receiver is configured correctly",
                        action="No action needed.")
    return Notification(receiver=receiver, group_key="test", alerts=[t], reason="test", at=now,
                        id=f"test:{receiver}:{now!r}" + (":resolved" if resolved else ""))


def cmd_test_notify(args: argparse.Namespace, settings: NotifierSettings) -> int:
    """Send a test message to every configured receiver (or ``--receiver``); exit 1 if any fails."""
    return asyncio.run(_test_notify(settings, args.receiver))


async def _test_notify(settings: NotifierSettings, only: list[str] | None) -> int:
    receivers = settings.notify.receivers
    unknown = sorted(set(only or []) - {r.name for r in receivers})
    if unknown:
        print(f"gpuwarden test-notify: no receiver named {', '.join(unknown)}", file=sys.stderr)
        return 2
    if not receivers:
        print("gpuwarden test-notify: no receivers configured (notify.receivers)", file=sys.stderr)
        return 2
    # No spool and no fallback: a test reports each receiver's own answer.
    delivery = Delivery([r.model_copy(update={"fallback": []}) for r in receivers], spool=None,
                        language=settings.notify.language or settings.language,
                        timezone=settings.notify.timezone, max_attempts=1)
    failed = 0
    try:
        now = time.time()
        for r in receivers:
            if only and r.name not in only:
                continue
            out = await delivery.deliver(sample_notification(r.name, now))
            if out.status == "delivered" and CHANNELS[r.kind].opens_incidents:
                closed = await delivery.deliver(sample_notification(r.name, now, resolved=True))
                out = closed if closed.status != "delivered" else replace(out, detail=f"{out.detail}, then resolved")
            failed += out.status != "delivered"
            print(f"{r.name:<20} {r.kind:<10} {out.status:<9} {out.detail}")
    finally:
        await delivery.aclose()
    return 1 if failed else 0
