"""The notifier as one object: history, routing, delivery and timers behind three calls.

``gpuwarden run`` (in process, event-time clock) and ``gpuwarden notify``
(Kafka, wall clock) both drive this class, so both send the same messages for
the same transitions. ``clock`` is the router's (what alerts say and when
groups flush); delivery always runs on the wall clock (signatures, rate limits,
backoff, Retry-After), so a simulated hour never signs an hour-old timestamp
and never bursts past a platform's limit. Delivery is injected or built from
``notify.receivers``; handing it a notification never waits on the network.

The router's state (open groups, who was notified, escalation progress, dedup)
is kept in the spool's kv store (``notify``/``router``) and restored at start,
so a restart neither loses the resolve of an alert paged before it nor an
escalation in progress.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from gpuwarden.contract import AlertTransition, Topics, encode
from gpuwarden.spool import Spool
from gpuwarden.notifiers.config import NotifierSettings
from gpuwarden.notifiers.control import ControlState, load_spool, warn_each
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.repeat import RepeatOffenders
from gpuwarden.notifiers.router import Router

log = logging.getLogger("gpuwarden.notify")
STATE_NS, STATE_KEY = "notify", "router"
REPEAT_KEY = "repeat-offenders"
#: What a Notifier calls with each transition once routed (``on_routed``).
OnRouted = Callable[["Notifier", AlertTransition], Awaitable[None]]


#: A config without receivers: every alert is recorded, none is sent (a typo'd section used to
#: look like this and pass unnoticed, issue #18 defect 8).
NOWHERE = "no receiver configured (notify.receivers is empty): alerts are recorded in the spool but sent nowhere"


class Notifier:
    """Record, route, deliver; ``tick`` runs the timers (group flushes, repeats, escalation, spool drain)."""

    def __init__(self, settings: NotifierSettings, *, spool: Spool | None, clock: Callable[[], float] = time.time,
                 delivery: Delivery | None = None, record_history: bool = True,
                 on_routed: OnRouted | None = None) -> None:
        """``record_history``: append each transition to the spool's ``alerts`` log (standalone);
        the Kafka worker passes False, the ``alerts`` topic being the history there. ``on_routed``:
        called with each transition once routed (the composition root's remediation auto policy)."""
        self.on_routed = on_routed
        self.config = settings.notify
        self.spool = spool
        self.clock = clock
        self.alerts_topic = Topics(settings.kafka.topic_prefix).alerts
        self.record_history = record_history and spool is not None
        self.control = ControlState()
        self._control_in_spool = spool is not None and self.config.control == "spool"
        self._maintained_at = float("-inf")
        self._reload_control()
        self.router = Router(self.config, self.control)
        self.repeats = RepeatOffenders(self.config.repeat_offenders)
        self._dirty = False
        """Router state changed since it was last saved."""
        self._restore_state()
        if delivery is None:
            delivery = Delivery(self.config.receivers, spool=spool,
                                language=self.config.language or settings.language, timezone=self.config.timezone)
        self.delivery = delivery
        self.nowhere = None if self.config.receivers else NOWHERE
        """Said at start and in the live view when no receiver is configured."""
        if self.nowhere:
            log.warning("%s", self.nowhere)
        self.sent = 0
        """Notifications handed to delivery."""

    async def handle(self, transition: AlertTransition) -> None:
        self._route(self.repeats.observe(transition))
        if self.on_routed is not None:
            await self.on_routed(self, transition)

    def _route(self, transitions: list[AlertTransition]) -> None:
        for t in transitions:
            if self.record_history:
                self.record(t)
            self._dirty = True
            self._submit(self.router.on_transition(t, self.clock()))

    def record(self, transition: AlertTransition) -> None:
        """Append to the spool's ``alerts`` log: the history that ``gpuwarden ack``, export and retros read."""
        assert self.spool is not None
        self.spool.append(self.alerts_topic, encode(transition), key=transition.fingerprint, ts=transition.ts)

    async def tick(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        maintain = now - self._maintained_at >= self.config.tick_interval
        if maintain:
            self._maintained_at = now
            self._reload_control()
            self.delivery.drain()
        self._route(self.repeats.tick(now))
        due = self.router.next_deadline()
        notes = self.router.tick(now)
        self._dirty = self._dirty or bool(notes) or (due is not None and due <= now)
        self._submit(notes)
        if maintain:
            self.save_state()

    def save_state(self) -> None:
        """Write the router state to the spool if it changed (each tick_interval, before an offset commit, at close)."""
        if self._dirty and self.spool is not None:
            self.spool.kv_put(STATE_NS, STATE_KEY, self.router.dump())
            self.spool.kv_put(STATE_NS, REPEAT_KEY, self.repeats.dump())
            self._dirty = False

    def next_deadline(self) -> float | None:
        return self.router.next_deadline()

    async def drain_before_exit(self, stop: asyncio.Event) -> None:
        """Give the receivers' queues up to ``notify.drain_on_exit`` of wall time, unless ``stop`` is set."""
        if stop.is_set() or not self.delivery.drain():
            return
        waits = [asyncio.ensure_future(self.delivery.wait_idle()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waits, timeout=self.config.drain_on_exit, return_when=asyncio.FIRST_COMPLETED)
        for w in waits:
            w.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

    async def aclose(self) -> None:
        self.save_state()
        await self.delivery.aclose()

    def _restore_state(self) -> None:
        repeats = self.spool.kv_get(STATE_NS, REPEAT_KEY) if self.spool is not None else None
        if repeats is not None:
            try:
                self.repeats.load(repeats)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("repeat offenders' state unreadable (%s): counting afresh", e)
        data = self.spool.kv_get(STATE_NS, STATE_KEY) if self.spool is not None else None
        if data is None:
            return
        try:
            warn_each(self.router.load(data))
        except ValueError as e:
            log.warning("%s: starting with empty routing state", e)
            return
        log.info("routing state restored: %d groups, %d pages", len(self.router.groups), len(self.router.pages))

    def _reload_control(self) -> None:
        """Standalone: the CLI writes silences/acks into the spool from another process; pick them up."""
        if self._control_in_spool:
            assert self.spool is not None
            warn_each(load_spool(self.spool, self.control)[1])

    def _submit(self, notes: list[Notification]) -> None:
        """Into each receiver's queue; its own worker sends, so no receiver waits on another."""
        for n in notes:
            self.sent += 1
            self.delivery.submit(n)
            log.debug("%s %s %s → queued", n.receiver, n.reason, ",".join(a.fingerprint for a in n.alerts))
