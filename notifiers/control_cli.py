"""``gpuwarden silence add|list|expire`` and ``gpuwarden ack``: write control records where
``notify.control`` says (the spool, or the compacted Kafka topic) and read them back."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
import time
import uuid
from pathlib import Path

from gpuwarden.contract import Ack, AlertTransition, Silence, Topics
from gpuwarden.spool import Spool
from gpuwarden.notifiers.alertlog import AlertLog
from gpuwarden.notifiers.config import NotifierSettings, parse_matcher
from gpuwarden.notifiers.control import ControlRecord, ControlState, load_spool, warn_each, write_spool
from gpuwarden.notifiers.kafka import read_control, write_control
from gpuwarden.notifiers.matchers import show
from gpuwarden.notifiers.pipeline import STATE_KEY, STATE_NS
from gpuwarden.notifiers.router import firing_in_state


def _open_spool(settings: NotifierSettings) -> Spool:
    return Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)


async def read_state(settings: NotifierSettings) -> ControlState:
    """The control state where ``notify.control`` keeps it (the CLI and the web console read it here)."""
    if settings.notify.control == "kafka":
        return await read_control(settings.kafka)
    with _open_spool(settings) as spool:
        state, problems = load_spool(spool)
    warn_each(problems)
    return state


async def write_record(settings: NotifierSettings, record: ControlRecord) -> None:
    """Write one silence, ack or override where ``notify.control`` says."""
    if settings.notify.control == "kafka":
        await write_control(settings.kafka, record)
    else:
        with _open_spool(settings) as spool:
            write_spool(spool, record)


def who(args: argparse.Namespace) -> str:
    if args.by:
        return args.by
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER", "unknown")


def _fmt_time(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(ts))


def cmd_silence(args: argparse.Namespace, settings: NotifierSettings) -> int:
    """``gpuwarden silence add|list|expire``; writes where ``notify.control`` says."""
    return asyncio.run(_silence(args, settings))


async def _silence(args: argparse.Namespace, settings: NotifierSettings) -> int:
    now = time.time()
    if args.silence_command == "add":
        try:
            s = new_silence(args.matchers, args.duration, who(args), args.comment, now)
        except ValueError as e:
            print(f"gpuwarden silence add: {e}", file=sys.stderr)
            return 2
        await write_record(settings, s)
        print(f"{s.id}  until {_fmt_time(s.ends_at)}  {' '.join(show(m) for m in s.matchers)}")
        return 0
    state = await read_state(settings)
    if args.silence_command == "list":
        for s in state.silences(now):
            print(f"{s.id}  until {_fmt_time(s.ends_at)}  by {s.created_by}  "
                  f"{' '.join(show(m) for m in s.matchers)}  {s.comment}".rstrip())
        return 0
    try:
        ended = expired(state, args.id, now)
    except LookupError as e:
        print(f"gpuwarden silence expire: {e}", file=sys.stderr)
        return 1
    await write_record(settings, ended)
    print(f"{args.id}  expired")
    return 0


def new_silence(matchers: list[str], duration_s: float, by: str, comment: str, now: float) -> Silence:
    """A silence from matcher texts such as ``node=gpu-07 rule=~thermal.*``; ValueError names a bad one."""
    if not matchers:
        raise ValueError("expected at least one matcher such as node=gpu-07")
    if duration_s <= 0:
        raise ValueError("expected a positive duration")
    return Silence(id=uuid.uuid4().hex[:12], matchers=[parse_matcher(m) for m in matchers], starts_at=now,
                   ends_at=now + duration_s, created_by=by, comment=comment)


def expired(state: ControlState, silence_id: str, now: float) -> Silence:
    """The active silence ``silence_id`` ending ``now`` (kept, so who silenced what stays readable);
    LookupError when there is none."""
    found = state.records.get(f"silence:{silence_id}")
    if not isinstance(found, Silence) or found.ends_at <= now:
        raise LookupError(f"no active silence {silence_id!r}")
    return found.model_copy(update={"ends_at": now})


def open_alerts(settings: NotifierSettings, spool: Spool,
                log: AlertLog | None = None) -> dict[str, AlertTransition] | None:
    """Firing alerts by fingerprint, as this spool knows them: the alert history ``gpuwarden run``
    keeps, else the router state a ``gpuwarden notify`` on this host saves; None when it has neither.
    ``log``: that history as a caller keeps it current (the console), else it is read here."""
    if log is None:
        log = AlertLog()
        for rec in spool.read(Topics(settings.kafka.topic_prefix).alerts):
            log.add(rec.value)
    if log.latest:
        return log.firing()
    state = spool.kv_get(STATE_NS, STATE_KEY)
    return None if state is None else firing_in_state(state)


def cmd_ack(args: argparse.Namespace, settings: NotifierSettings) -> int:
    """``gpuwarden ack FINGERPRINT``: stops repeats and escalation of that alert's current episode.

    The fingerprint (or a unique prefix, as messages show it) must be of an open alert: exit 1
    naming the open ones otherwise, with nothing written and no spool created. Where
    ``notify.control`` is the spool, that spool holds the alerts: with no spool file, or none of
    their history or the notifier's state in it, no fingerprint is known (exit 1). Where it is
    Kafka, the CLI may run on another host than ``gpuwarden notify``, whose local spool cannot
    tell: the ack is written to the control topic unchecked, and that is said."""
    fp = args.fingerprint
    path = Path(settings.spool.path)
    firing = None
    if path.exists():
        with _open_spool(settings) as spool:
            firing = open_alerts(settings, spool)
    if firing is None:
        where = f"no alert history or notifier state in {path}" if path.exists() else f"no spool at {path}"
        if settings.notify.control != "kafka":
            print(f"gpuwarden ack: {where}, so no open alert {fp!r}; nothing written (is --config the "
                  f"one gpuwarden run or notify uses?)", file=sys.stderr)
            return 1
        print(f"gpuwarden ack: {where}; {fp} not checked against the open alerts", file=sys.stderr)
    else:
        hits = [f for f in firing if f == fp] or [f for f in firing if f.startswith(fp)]
        if len(hits) != 1:
            listed = "; ".join(f"{f} ({firing[f].rule}: {firing[f].summary})" for f in sorted(firing)[:20])
            why = f"{fp!r} matches {len(hits)} open alerts" if hits else f"no open alert {fp!r}"
            print(f"gpuwarden ack: {why}; open: {listed or 'none'}", file=sys.stderr)
            return 1
        fp = hits[0]
    a = Ack(fingerprint=fp, by=who(args), at=time.time(), comment=args.comment)
    asyncio.run(write_record(settings, a))
    print(f"acknowledged {a.fingerprint} by {a.by}")
    return 0
