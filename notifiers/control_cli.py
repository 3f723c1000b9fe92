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

from gpuwarden.contract import Ack, AlertState, AlertTransition, ContractError, Silence, Topics, decode
from gpuwarden.spool import Spool
from gpuwarden.notifiers.config import parse_matcher
from gpuwarden.notifiers.control import ControlRecord, ControlState, load_spool, warn_each, write_spool
from gpuwarden.notifiers.kafka import read_control, write_control
from gpuwarden.notifiers.matchers import show
from gpuwarden.notifiers.pipeline import STATE_KEY, STATE_NS
from gpuwarden.notifiers.router import firing_in_state
from gpuwarden.notifiers.settings import NotifierSettings


def _open_spool(settings: NotifierSettings) -> Spool:
    return Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)


async def _read(settings: NotifierSettings) -> ControlState:
    if settings.notify.control == "kafka":
        return await read_control(settings.kafka)
    with _open_spool(settings) as spool:
        state, problems = load_spool(spool)
    warn_each(problems)
    return state


async def _write(settings: NotifierSettings, record: ControlRecord) -> None:
    if settings.notify.control == "kafka":
        await write_control(settings.kafka, record)
    else:
        with _open_spool(settings) as spool:
            write_spool(spool, record)


def _who(args: argparse.Namespace) -> str:
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


def open_alerts(settings: NotifierSettings, spool: Spool) -> dict[str, AlertTransition] | None:
    """Firing alerts by fingerprint, as this spool knows them: the alert history ``gpuwarden run``
    keeps, else the router state a ``gpuwarden notify`` on this host saves; None when it has neither."""
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


def cmd_ack(args: argparse.Namespace, settings: NotifierSettings) -> int:
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
