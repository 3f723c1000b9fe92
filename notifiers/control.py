"""Control state (silences, acknowledgements, on-call overrides) and the CLI that writes it.

The state is a map keyed by :func:`gpuwarden.contract.record_key`, the last
write per key winning, which is exactly what a compacted Kafka topic keeps.
It lives in the ``control`` topic (``notify.control: kafka``, cluster mode)
or in the spool's key/value store (``notify.control: spool``, the default,
for standalone ``gpuwarden run``). A tombstone or an ``ends_at`` in the past
ends a silence; ``silence expire`` writes ``ends_at = now`` so the history of
who silenced what stays readable.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import os
import sys
import time
import uuid
from typing import Any

from gpuwarden.contract import (
    Ack,
    AlertState,
    AlertTransition,
    ContractError,
    OnCallOverride,
    Silence,
    Topics,
    decode,
    decode_control,
    encode,
    record_key,
)
from gpuwarden.spool import Spool
from gpuwarden.notifiers.config import parse_matcher
from gpuwarden.notifiers.matchers import alert_labels, matches_all, show
from gpuwarden.notifiers.oncall import Cover

ControlRecord = Silence | Ack | OnCallOverride
KV_NS = "control"
log = logging.getLogger("gpuwarden.notify")


def warn_each(problems: list[str]) -> None:
    """Bad control records are reported and skipped: one typo must not stop the notifier."""
    for p in problems:
        log.warning("%s (ignored)", p)


class ControlState:
    """Silences, acks and overrides by key; the router asks it questions at a given time."""

    def __init__(self) -> None:
        self._records: dict[str, ControlRecord] = {}
        self._silences: list[Silence] | None = None  # sorted cache, rebuilt after a change
        self._index: dict[tuple[str, str], list[Silence]] = {}
        self._unindexed: list[Silence] = []

    @property
    def records(self) -> dict[str, ControlRecord]:
        return self._records

    @records.setter
    def records(self, value: dict[str, ControlRecord]) -> None:
        self._records, self._silences = value, None

    def apply(self, record: ControlRecord) -> None:
        self._records[record_key(record)] = record
        self._silences = None

    def apply_raw(self, key: str, value: bytes | None) -> None:
        """One record as stored (a ``None`` value is a tombstone); raises ContractError if malformed."""
        if value is None:
            self._records.pop(key, None)
            self._silences = None
        else:
            self.apply(decode_control(value))

    def silences(self, now: float | None = None) -> list[Silence]:
        """All silences, or those active at ``now``, oldest first."""
        if self._silences is None:
            self._silences = sorted((r for r in self._records.values() if isinstance(r, Silence)),
                                    key=lambda s: (s.starts_at, s.id))
            self._index, self._unindexed = {}, []
            for sil in self._silences:
                eq = next((m for m in sil.matchers if m.op == "="), None)
                if eq is None:
                    self._unindexed.append(sil)
                else:
                    self._index.setdefault((eq.label, eq.value), []).append(sil)
        return [s for s in self._silences if now is None or s.starts_at <= now < s.ends_at]

    def silenced_by(self, t: AlertTransition, now: float) -> str | None:
        """The id of the oldest active silence matching the alert, if any.

        Silences are indexed by one of their ``=`` matchers, so an alert is checked
        against the few that could match, not all of them.
        """
        if self._silences is None:
            self.silences()
        if not self._silences:
            return None
        labels = alert_labels(t)
        candidates = list(self._unindexed)
        for item in labels.items():
            candidates += self._index.get(item, ())
        hits = [s for s in candidates if s.starts_at <= now < s.ends_at and matches_all(s.matchers, labels)]
        return min(hits, key=lambda s: (s.starts_at, s.id)).id if hits else None

    def ack(self, t: AlertTransition) -> Ack | None:
        """The ack of this alert's current episode (an ack from before it started does not count)."""
        a = self._records.get(f"ack:{t.fingerprint}")
        return a if isinstance(a, Ack) and a.at >= t.started_at else None

    def covers(self, schedule: str) -> list[Cover]:
        return [Cover(r.user, r.starts_at, r.ends_at) for r in self._records.values()
                if isinstance(r, OnCallOverride) and r.schedule == schedule]


# ----------------------------------------------------------------------- stores


def load_spool(spool: Spool, state: ControlState | None = None) -> tuple[ControlState, list[str]]:
    """Read the spool's control records into ``state``; returns it and one line per bad record."""
    state = state or ControlState()
    problems = []
    fresh = ControlState()
    for key, value in spool.kv_items(KV_NS):
        try:
            fresh.apply_raw(key, value)
        except ContractError as e:
            problems.append(f"control record {key}: {e}")
    state.records = fresh.records
    return state, problems


def write_spool(spool: Spool, record: ControlRecord) -> None:
    spool.kv_put(KV_NS, record_key(record), encode(record))


def _open_spool(settings: Any) -> Spool:
    return Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)


async def _read(settings: Any) -> ControlState:
    if settings.notify.control == "kafka":
        from gpuwarden.notifiers.kafka import read_control

        return await read_control(settings)
    with _open_spool(settings) as spool:
        state, problems = load_spool(spool)
    warn_each(problems)
    return state


async def _write(settings: Any, record: ControlRecord) -> None:
    if settings.notify.control == "kafka":
        from gpuwarden.notifiers.kafka import write_control

        await write_control(settings, record)
    else:
        with _open_spool(settings) as spool:
            write_spool(spool, record)


# ----------------------------------------------------------------------- CLI


def _who(args: argparse.Namespace) -> str:
    if args.by:
        return args.by
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def _fmt_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def cmd_silence(args: argparse.Namespace, settings: Any) -> int:
    """``gpuwarden silence add|list|expire``; writes where ``notify.control`` says."""
    return asyncio.run(_silence(args, settings))


async def _silence(args: argparse.Namespace, settings: Any) -> int:
    now = time.time()
    if args.silence_command == "add":
        try:
            matchers = [parse_matcher(m) for m in args.matchers]
        except ValueError as e:
            print(f"gpuwarden silence add: {e}", file=sys.stderr)
            return 2
        s = Silence(id=uuid.uuid4().hex[:12], matchers=matchers, starts_at=now,
                    ends_at=now + args.duration, created_by=_who(args), comment=args.comment)
        await _write(settings, s)
        print(f"{s.id}  until {_fmt_time(s.ends_at)}  {' '.join(show(m) for m in matchers)}")
        return 0
    state = await _read(settings)
    if args.silence_command == "list":
        for s in state.silences(now):
            print(f"{s.id}  until {_fmt_time(s.ends_at)}  by {s.created_by}  "
                  f"{' '.join(show(m) for m in s.matchers)}  {s.comment}".rstrip())
        return 0
    found = state.records.get(f"silence:{args.id}")
    if not isinstance(found, Silence) or found.ends_at <= now:
        print(f"gpuwarden silence expire: no active silence {args.id!r}", file=sys.stderr)
        return 1
    await _write(settings, found.model_copy(update={"ends_at": now}))
    print(f"{args.id}  expired")
    return 0


def open_alerts(settings: Any, spool: Spool) -> dict[str, AlertTransition] | None:
    """Firing alerts by fingerprint, as this spool knows them: the alert history ``gpuwarden run``
    keeps, else the router state a ``gpuwarden notify`` on this host saves; None when it has neither."""
    from gpuwarden.notifiers.pipeline import STATE_KEY, STATE_NS
    from gpuwarden.notifiers.router import firing_in_state

    latest: dict[str, AlertTransition] = {}
    for rec in spool.read(Topics(settings.kafka.topic_prefix).alerts):
        try:
            t = decode(rec.value, AlertTransition)
        except ContractError:
            continue
        latest[t.fingerprint] = t
    if latest:
        return {fp: t for fp, t in latest.items() if t.state == AlertState.FIRING}
    state = spool.kv_get(STATE_NS, STATE_KEY)
    return None if state is None else firing_in_state(state)


def cmd_ack(args: argparse.Namespace, settings: Any) -> int:
    """``gpuwarden ack FINGERPRINT``: stops repeats and escalation of that alert's current episode.

    The fingerprint (or a unique prefix, as messages show it) must be of an open alert: exit 1
    naming the open ones otherwise. A spool with no alert history or notifier state (the CLI on
    another host than ``gpuwarden notify``) cannot tell: the ack is written and that is said."""
    fp = args.fingerprint
    with _open_spool(settings) as spool:
        firing = open_alerts(settings, spool)
    if firing is None:
        print(f"gpuwarden ack: no alert history or notifier state in {settings.spool.path}; "
              f"{fp} not checked against the open alerts", file=sys.stderr)
    else:
        hits = [f for f in firing if f == fp] or [f for f in firing if f.startswith(fp)]
        if len(hits) != 1:
            listed = "; ".join(f"{f} ({firing[f].rule}: {firing[f].summary})" for f in sorted(firing)[:20])
            why = f"{fp!r} matches {len(hits)} open alerts" if hits else f"no open alert {fp!r}"
            print(f"gpuwarden ack: {why}; open: {listed or 'none'}", file=sys.stderr)
            return 1
        fp = hits[0]
    a = Ack(fingerprint=fp, by=_who(args), at=time.time(), comment=args.comment)
    asyncio.run(_write(settings, a))
    print(f"acknowledged {a.fingerprint} by {a.by}")
    return 0
