"""Delivery: one queue and one worker per receiver, rate limits, backoff, digests, fallback, around pure channels.

The notifier hands notifications over with :meth:`Delivery.submit`, which never
waits on the network: the notification goes to its receiver's queue (the
spool's ``notify.outbox.<receiver>``, durable across restarts) and that
receiver's worker sends it. Workers are independent, so one receiver's rate
limit, Retry-After, backoff or timeout never delays another's; within a queue
critical notifications go first, and whatever waits is merged into one digest
at the next free slot (never dropped).

Every wait here is on ``clock``, the wall clock (injected only to simulate
it): rate limits, signature timestamps, retry backoff and Retry-After. Event
time only ever appears in what a message says. A failed send (5xx, timeout,
rate limit) sets the receiver's next attempt at exponential backoff with
jitter, capped at a minute (``PROBE_S``), and never before the platform's Retry-After;
while it is down the worker probes with one request (the queue as one digest) per backoff
step instead of hammering it, so it is heard from within a minute of its return.
After ``max_attempts`` failures in a row the fallbacks get the queued
notifications. A refused signature or token (``Permanent.auth``) makes delivery read the
receiver's secrets again and, when they changed, retry once; still refused, the message goes to
a fallback and a meta alert about the receiver goes to all the others until it accepts again
(:mod:`gpuwarden.notifiers.refusals`). :meth:`Delivery.deliver` is the same path for one notification
whose answer the caller waits for (``test-notify``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo

import httpx

from gpuwarden.config import ConfigError
from gpuwarden.contract import AlertState, Tier, is_simulated
from gpuwarden.spool import Spool
from gpuwarden.notifiers import alertmanager, apprise_channel, dingtalk, email, feishu, pagerduty, slack, webhook, wecom
from gpuwarden.notifiers.channel import Channel, SendContext
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.outbox import (Delivered, DeliveryLog, decode_notification, encode_notification,
                              outbox_topic)
from gpuwarden.notifiers import refusals
from gpuwarden.notifiers.ratelimit import Limiter
from gpuwarden.notifiers.refusals import Refusal
from gpuwarden.notifiers.receivers import Receiver, fallback_problems
from gpuwarden.notifiers.redact import LOGGERS as REDACTED_LOGGERS, install as install_redaction, redact
from gpuwarden.notifiers.localise import localise
from gpuwarden.notifiers.telemetry import DeliveryMetrics
from gpuwarden.notifiers.render import Locale, is_resolved, render_text, top_tier
from gpuwarden.notifiers.verdict import Ok, Permanent, Retry, Verdict

log = logging.getLogger("gpuwarden.notifiers.delivery")

#: Every channel by its receiver section's name: the only place delivery learns of a platform.
CHANNELS: dict[str, Channel[Any]] = {
    "slack": slack.CHANNEL, "feishu": feishu.CHANNEL, "dingtalk": dingtalk.CHANNEL, "wecom": wecom.CHANNEL,
    "pagerduty": pagerduty.CHANNEL, "webhook": webhook.CHANNEL, "alertmanager": alertmanager.CHANNEL,
    "email": email.CHANNEL,
    "apprise": apprise_channel.CHANNEL,
}
MAX_DIGEST = 1000  # notifications merged into one digest at most (the text limit usually binds first)
PROBE_S = 60.0
"""The longest backoff step: while messages wait for a receiver that is down, it is probed at least
this often (jittered to 30-60 s), so what piled up goes out within a minute of its return (#31)."""

Status = Literal["delivered", "spooled", "failed", "fallback"]


@dataclass
class Outcome:
    receiver: str
    notification_id: str
    status: Status
    detail: str
    attempts: int


def notification_id(n: Notification) -> str:
    """The router's id, or a stable one from what the notification says."""
    if n.id:
        return n.id
    parts = [n.receiver, n.group_key, n.reason, repr(n.at)] + [f"{a.fingerprint}:{a.state}:{a.ts}" for a in n.alerts]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def not_sent(r: Receiver, n: Notification) -> str | None:
    """Why ``r`` does not get ``n`` at all, or None. An ``ack`` goes only to channels that can say it
    (``sends_ack``: PagerDuty's ``acknowledge``); chat would render it as one more firing message."""
    if is_resolved(n) and not r.channel.send_resolved:
        return "not sent: send_resolved is false"
    if n.reason == "ack" and not CHANNELS[r.kind].sends_ack:
        return f"not sent: {r.kind} has no acknowledge message"
    return None


def digest(receiver: str, items: list[Notification]) -> Notification:
    """Queued notifications merged into one message, every alert transition kept, in order."""
    if len(items) == 1:
        return items[0]
    ids = ",".join(n.id for n in items)
    return Notification(
        receiver=receiver, group_key="digest", reason="digest", at=max(n.at for n in items),
        alerts=[a for n in items for a in n.alerts],
        mentions=list(dict.fromkeys(m for n in items for m in n.mentions)),
        escalation_level=max(n.escalation_level for n in items),
        id="digest:" + hashlib.sha256(ids.encode()).hexdigest()[:24],
    )


def reread_on_sighup(reread: Callable[[], object]) -> bool:
    """SIGHUP re-reads every receiver's secrets (a rotated file or token); False where no handler can be
    set (not the main thread, no SIGHUP on this platform)."""
    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reread)
    except (RuntimeError, ValueError, NotImplementedError, AttributeError):
        return False
    return True


class Delivery:
    def __init__(self, receivers: list[Receiver], *, spool: Spool | None, language: str = "en",
                 timezone: str = "UTC", clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 client: httpx.AsyncClient | None = None, log: DeliveryLog | None = None,
                 max_attempts: int = 4, backoff_s: float = 1.0, max_backoff_s: float = PROBE_S,
                 timeout_s: float = 10.0, rng: Callable[[], float] = random.random,
                 metrics: DeliveryMetrics | None = None) -> None:
        """``clock``/``sleep``: the wall clock (never event time); tests inject a simulated one.
        ``timezone``: the zone messages show times in (validated by the config). ``metrics``: where
        outcomes, retries, waits and queues are counted (its own registry when None)."""
        if problems := fallback_problems(receivers):
            raise ValueError("; ".join(problems))
        # Resolve every secret now: a missing one fails at start, and redaction knows them all.
        self._secrets = {r.name: CHANNELS[r.kind].secrets(r.channel) for r in receivers}
        install_redaction([s for values in self._secrets.values() for s in values],
                          loggers=(*REDACTED_LOGGERS, *(name for c in CHANNELS.values() for name in c.loggers)))
        problems = [p for kind, c in CHANNELS.items()
                    for p in c.problems([(r.name, r.channel) for r in receivers if r.kind == kind])]
        if problems:
            raise ValueError("; ".join(problems))
        self.receivers = {r.name: r for r in receivers}
        self._own_spool = spool is None
        self.spool = spool if spool is not None else Spool(":memory:")
        self.language, self.tz = language, ZoneInfo(timezone)
        self.clock, self.sleep, self.rng = clock, sleep, rng
        self.max_attempts, self.backoff_s, self.max_backoff_s = max_attempts, backoff_s, max_backoff_s
        self._own_client = client is None
        self.client = client or httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)))
        self.context = SendContext(self.client, clock, timeout_s)
        self.log = log or DeliveryLog(self.spool)
        self.metrics = metrics or DeliveryMetrics(clock)
        self.refusing = {f.receiver: f for f in refusals.read_all(self.spool) if f.receiver in self.receivers}
        """Receivers that refuse our credentials (the meta alert is open), restored across restarts."""
        for r in receivers:
            self.metrics.known(r.name, get_args(Status))
            self.metrics.refusing(r.name, r.name in self.refusing)
        self.delivered = Delivered(self.spool)
        self.limiters = {r.name: Limiter(CHANNELS[r.kind].rate_limits(r.channel), clock) for r in receivers}
        self._locks = {r.name: asyncio.Lock() for r in receivers}
        self._failures: dict[str, int] = {}  # receiver → failed sends in a row (present = down)
        self._not_before: dict[str, float] = {}  # receiver → wall time of its next allowed attempt
        self._flushers: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ public

    def submit(self, n: Notification) -> None:
        """Queue ``n`` for its receiver's worker; returns at once (the outcome goes to the delivery log)."""
        r = self.receivers.get(n.receiver)
        n = replace(n, id=notification_id(n))
        if r is None:
            self._outcome(n, "failed", f"no receiver named {n.receiver!r}", 0)
        elif (r.name, n.id) not in self.delivered:
            if (why := not_sent(r, n)) is not None:
                self._outcome(n, "delivered", why, 0)
            else:
                self.spool.append(outbox_topic(r.name), encode_notification(n), key=n.id, ts=n.at)
                self._ensure_flusher(r.name)

    async def deliver(self, n: Notification) -> Outcome:
        """Send now and return the answer, or queue (digest / backoff), or hand to a fallback; never drops it."""
        r = self.receivers.get(n.receiver)
        n = replace(n, id=notification_id(n))
        if r is None:
            return self._outcome(n, "failed", f"no receiver named {n.receiver!r}", 0)
        if (r.name, n.id) in self.delivered:
            return Outcome(r.name, n.id, "delivered", "already delivered (same id)", 0)
        if (why := not_sent(r, n)) is not None:
            return self._outcome(n, "delivered", why, 0)
        async with self._locks[r.name]:
            queued = self.spool.pending_count(outbox_topic(r.name))
            down = r.name in self._failures
            if queued and not down:
                return self._queue(r, n, f"queued behind {queued} notification(s)")
            if not down:
                if self._wait_s(r.name) > 0:
                    return self._queue(r, n, "rate limited: queued for the next digest")
                verdict, attempts = await self._send(r, n, self.max_attempts)
                if isinstance(verdict, Ok):
                    return self._done(r, [n], attempts)
                self._warn(r, verdict, attempts)
                if isinstance(verdict, Retry):
                    self._failed(r.name, attempts, verdict.after_s)
        fb = await self._fallback(r, n, refused=not down and isinstance(verdict, Permanent))
        if not down and isinstance(verdict, Permanent):
            self._refused(r, verdict)  # after the fallback: the meta alert must not queue ahead of it
        if fb is not None:
            return fb
        if not down and isinstance(verdict, Permanent):
            return self._outcome(n, "failed", verdict.message, attempts)
        return self._queue(r, n, "receiver down: queued until it recovers")

    def drain(self) -> int:
        """Start the worker of every outbox that holds notifications (after a restart, on each tick);
        returns how many are queued. Workers send; this never does, so it cannot bypass a backoff."""
        queued = 0
        for name in self.receivers:
            n = self.spool.pending_count(outbox_topic(name))
            oldest = self.spool.pending(outbox_topic(name), limit=1)[0].ts if n else None
            self.metrics.queue(name, n, oldest)
            if n:
                queued += n
                self._ensure_flusher(name)
        return queued

    def reread_secrets(self, names: list[str] | None = None) -> list[str]:
        """Read the secrets of ``names`` (all receivers: SIGHUP) again; returns the receivers whose
        secrets changed. Only names are logged, never a value; an unreadable one keeps the last."""
        changed = []
        for name in names if names is not None else list(self.receivers):
            r = self.receivers[name]
            try:
                values = CHANNELS[r.kind].secrets(r.channel)
            except ConfigError as e:
                log.warning("%s: secrets not re-read: %s", name, redact(str(e)))
                continue
            install_redaction(values)
            if values != self._secrets[name]:
                self._secrets[name] = values
                changed.append(name)
        log.info("secrets re-read for %d receiver(s); changed: %s", len(names or self.receivers),
                 ", ".join(changed) or "none")
        return changed

    async def wait_idle(self) -> None:
        """Wait until every worker has emptied its outbox."""
        while tasks := [t for t in self._flushers.values() if not t.done()]:
            await asyncio.gather(*tasks)

    def pending(self, receiver: str) -> int:
        return self.spool.pending_count(outbox_topic(receiver))

    async def aclose(self) -> None:
        """Stop the workers at once (what they had not sent stays in the outbox for the next start)."""
        for t in self._flushers.values():
            t.cancel()
        await asyncio.gather(*self._flushers.values(), return_exceptions=True)
        if self._own_client:
            await self.client.aclose()
        if self._own_spool:
            self.spool.close()

    # ------------------------------------------------------------------ sending

    async def _send(self, r: Receiver, n: Notification, max_attempts: int) -> tuple[Verdict, int]:
        """Up to ``max_attempts`` sends while the answer is "retry"; a refused signature or token is
        retried once, at once, when re-reading the receiver's secrets finds them changed."""
        attempt, reread = 0, False
        while True:
            attempt += 1
            verdict = await self._send_once(r, n)
            if isinstance(verdict, Retry):
                self.metrics.retry(r.name)
            if isinstance(verdict, Permanent) and verdict.auth and not reread:
                reread = True
                if self.reread_secrets([r.name]):
                    log.warning("%s: %s; its secrets changed since: retrying once", r.name, redact(verdict.message))
                    continue
            if not isinstance(verdict, Retry) or attempt >= max_attempts:
                return verdict, attempt
            delay = self._backoff(attempt, verdict.after_s)
            log.info("%s: %s; retry %d in %.1fs", r.name, redact(verdict.message), attempt, delay)
            await self.sleep(delay)

    async def _send_once(self, r: Receiver, n: Notification) -> Verdict:
        channel = CHANNELS[r.kind]
        locale = self._locale(r)
        n = localise(n, locale.language)
        parts = [replace(n, alerts=[a]) for a in n.alerts] if channel.one_alert_per_request else [n]
        for part in parts:
            limiter = self.limiters[r.name]
            while (wait := limiter.wait_s()) > 0:  # wall clock: this wait always ends
                self.metrics.rate_limited(r.name, wait)
                await self.sleep(wait)
            limiter.try_take()
            verdict = await channel.send(r.channel, part, locale, self.context)
            limiter.answered()
            if not isinstance(verdict, Ok):
                return verdict
        return Ok()

    def _backoff(self, attempt: int, after_s: float | None) -> float:
        """Exponential in the failures so far, jittered (half to full step), capped; never under Retry-After."""
        base = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        jittered = base * (0.5 + 0.5 * self.rng())
        return max(jittered, after_s or 0.0)

    def _failed(self, name: str, attempts: int, after_s: float | None) -> int:
        """Count ``attempts`` more failures and set the next attempt; returns the failures in a row."""
        failures = self._failures[name] = self._failures.get(name, 0) + attempts
        self._not_before[name] = self.clock() + self._backoff(failures, after_s)
        return failures

    def down(self) -> frozenset[str]:
        """Receivers failing now: their last sends failed (backing off), or they refuse our
        credentials (the notifier's ``/-/ready`` reads it from its HTTP thread)."""
        return frozenset(self._failures) | frozenset(self.refusing)

    def _recovered(self, name: str) -> None:
        self._failures.pop(name, None)
        self._not_before.pop(name, None)

    def _wait_s(self, name: str) -> float:
        """Seconds until ``name`` may send: its rate limit (paced past a burst of half of it: what waits
        is merged), backoff or Retry-After, whichever ends last."""
        limiter = self.limiters[name]
        return max(limiter.wait_s(), limiter.pace_s(), self._not_before.get(name, 0.0) - self.clock(), 0.0)

    # ------------------------------------------------------------------ fallback, queue, workers

    async def _fallback(self, r: Receiver, n: Notification, refused: bool = False) -> Outcome | None:
        """Try each fallback now (not queued there: the notification stays owned by ``r``); ``refused``:
        ``r`` will never send it, so a fallback that cannot send now (its rate limit, its queue) queues it."""
        for name in r.fallback:
            fb = self.receivers[name]
            if not fb.accept_simulated and any(is_simulated(a.labels) for a in n.alerts):
                continue  # simulated alerts reach only receivers that opted in (router.py)
            m = replace(n, receiver=name)
            if (name, m.id) in self.delivered:
                return Outcome(r.name, n.id, "fallback", f"already delivered via {name}", 0)
            if not_sent(fb, m) or name in self.refusing:
                continue
            if self._wait_s(name) > 0 or self.spool.pending_count(outbox_topic(name)):
                if refused:
                    self._queue(fb, m, f"{r.name} refuses it: queued here")
                    return self._outcome(n, "fallback", f"{r.name} refuses it; queued for {name}", 0)
                continue
            async with self._locks[name]:
                verdict, attempts = await self._send(fb, m, self.max_attempts)
            if isinstance(verdict, Ok):
                self._done(fb, [m], attempts)
                return self._outcome(n, "fallback", f"{r.name} unavailable; delivered via {name}", attempts)
            if isinstance(verdict, Retry):
                self._failed(name, attempts, verdict.after_s)
            self._warn(fb, verdict, attempts)
        return None

    def _queue(self, r: Receiver, n: Notification, why: str) -> Outcome:
        self.spool.append(outbox_topic(r.name), encode_notification(n), key=n.id, ts=n.at)
        self._ensure_flusher(r.name)
        return self._outcome(n, "spooled", why, 0)

    def _ensure_flusher(self, name: str) -> None:
        task = self._flushers.get(name)
        if task is None or task.done():
            self._flushers[name] = asyncio.get_running_loop().create_task(self._flush(name))

    async def _flush(self, name: str) -> None:
        """The receiver's worker: wait for its next slot (rate limit, backoff), send the queue as digests."""
        r = self.receivers[name]
        while self.spool.pending_count(outbox_topic(name)):
            if (wait := self._wait_s(name)) > 0:
                if name not in self._failures:  # not a backoff: the rate limit (or its pacing)
                    self.metrics.rate_limited(name, wait)
                await self.sleep(wait)
                continue
            try:
                await self._drain_one(r)
            except Exception as e:  # a worker must not die: log and back off
                self._failed(name, 1, None)
                log.error("%s: flush failed: %s", name, redact(f"{type(e).__name__}: {e}"))

    async def _drain_one(self, r: Receiver) -> int:
        """Send the oldest queued notifications, critical first (one digest when several fit), once."""
        async with self._locks[r.name]:
            topic = outbox_topic(r.name)
            batch, done_ids = [], []
            records = [(rec.id, decode_notification(rec.value)) for rec in self.spool.pending(topic, limit=MAX_DIGEST)]
            records.sort(key=lambda x: top_tier(x[1]) != Tier.CRITICAL)  # stable: queue order within a tier
            if r.name not in self._failures and len(records) <= self.limiters[r.name].free():
                records = records[:1]  # healthy, room for each on its own: merge only what would wait
            for rid, n in records:
                if (r.name, n.id) in self.delivered:
                    done_ids.append(rid)
                elif not batch or ("ack" not in (n.reason, batch[0][1].reason)  # an ack keeps its own event
                                   and self._fits(r, [n for _, n in batch] + [n])):
                    batch.append((rid, n))
                else:
                    break
            self.spool.mark_published(done_ids)
            if not batch or self._wait_s(r.name) > 0:
                return 0
            items = [n for _, n in batch]
            verdict, attempts = await self._send(r, digest(r.name, items), 1)
            if isinstance(verdict, Retry):
                failures = self._failed(r.name, attempts, verdict.after_s)
                self._warn(r, verdict, failures)
                if failures == self.max_attempts and r.fallback:
                    await self._hand_to_fallbacks(r, batch)
                return 0
            if isinstance(verdict, Permanent):  # each goes to a fallback that takes it, or is failed
                self._warn(r, verdict, attempts)
                for rid, n in batch:
                    if await self._fallback(r, n, refused=True) is None:
                        self._outcome(n, "failed", verdict.message, attempts)
                    self.spool.mark_published([rid])
                self._refused(r, verdict)
                return 0
            self.spool.mark_published([rid for rid, _ in batch])
            self._recovered(r.name)
            self._done(r, items, attempts)
            return len(items)

    async def _hand_to_fallbacks(self, r: Receiver, batch: list[tuple[int, Notification]]) -> None:
        """``r`` just counted as down: what it holds goes to a fallback that takes it now."""
        for rid, n in batch:
            if await self._fallback(r, n) is not None:
                self.spool.mark_published([rid])

    def _fits(self, r: Receiver, items: list[Notification]) -> bool:
        if len(items) > MAX_DIGEST:
            return False
        locale = self._locale(r)
        _, body = render_text(localise(digest(r.name, items), locale.language), locale)
        return len(body.encode()) <= CHANNELS[r.kind].text_limit

    def _locale(self, r: Receiver) -> Locale:
        """The receiver's language (or the default), with the zone its times are shown in."""
        return Locale(r.language or self.language, self.tz)

    # ------------------------------------------------------------------ bookkeeping

    def _refused(self, r: Receiver, verdict: Permanent) -> None:
        """An authentication failure that re-reading did not cure: open the meta alert (once)."""
        if not verdict.auth or r.name in self.refusing:
            return
        refusal = self.refusing[r.name] = Refusal(r.name, r.kind, self.clock(), verdict.reason or verdict.message)
        refusals.save(self.spool, refusal)
        self.metrics.refusing(r.name, True)
        log.error("%s", refusal.summary(self.tz))
        self._meta(refusal, AlertState.FIRING)

    def _meta(self, refusal: Refusal, state: AlertState) -> None:
        """The meta alert about ``refusal`` to every other receiver that takes messages now, paging
        ones aside: it is an attention alert, and a chat room's secret never wakes on-call."""
        now = self.clock()
        t = refusal.transition(state, now, self.tz)
        for name, r in self.receivers.items():
            if name != refusal.receiver and name not in self.refusing and r.kind not in refusals.PAGING:
                self.submit(Notification(receiver=name, group_key=f"{refusals.RULE}/{refusal.receiver}", alerts=[t],
                                         reason="new" if state == AlertState.FIRING else "resolved", at=now,
                                         id=f"{refusals.RULE}/{refusal.receiver}/{refusal.since!r}/{state.value}"))

    def _done(self, r: Receiver, items: list[Notification], attempts: int) -> Outcome:
        if (refusal := self.refusing.pop(r.name, None)) is not None:  # it takes our messages again
            refusals.forget(self.spool, r.name)
            self.metrics.refusing(r.name, False)
            log.warning("%s accepts our messages again", r.name)
            self._meta(refusal, AlertState.RESOLVED)
        self.delivered.add(r.name, [n.id for n in items], self.clock())
        detail = "delivered" if len(items) == 1 else f"delivered in a digest of {len(items)}"
        outcomes = [self._outcome(n, "delivered", detail, attempts) for n in items]
        return outcomes[0]

    def _outcome(self, n: Notification, status: Status, detail: str, attempts: int) -> Outcome:
        detail = redact(detail)
        self.log.record(at=self.clock(), receiver=n.receiver, notification_id=n.id,
                        fingerprints=[a.fingerprint for a in n.alerts], status=status,
                        attempts=attempts, detail=detail)
        log.debug("%s %s: %s (%s)", n.receiver, n.id, status, detail)
        self.metrics.outcome(n.receiver, status)
        return Outcome(n.receiver, n.id, status, detail, attempts)

    def _warn(self, r: Receiver, verdict: Verdict, attempts: int) -> None:
        kind = "permanent error" if isinstance(verdict, Permanent) else "still failing"
        message = getattr(verdict, "message", "")
        log.warning("%s (%s): %s after %d attempt(s): %s", r.name, r.kind, kind, attempts, redact(message))
