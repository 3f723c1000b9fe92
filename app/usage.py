"""``gpuwarden report usage``: the usage table, or (``--post``) the weekly digest delivered.

The history room computes the usage and the digest record; this module, being the
composition root, hands that record to the notifiers' delivery.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from gpuwarden.app.settings import Settings
from gpuwarden.history.accounting import Usage, digest_record, render, usage_from_spool, weekly_queues, \
    weekly_usage
from gpuwarden.history.queues import QueueReport
from gpuwarden.notifiers.delivery import Delivery, Outcome
from gpuwarden.notifiers.message import Notification
from gpuwarden.spool import Spool
from gpuwarden.units import parse_time


def cmd_report_usage(args: argparse.Namespace, settings: Settings) -> int:
    """The table, CSV or JSON on stdout; with ``--post`` the weekly digest to its receiver."""
    now = time.time()
    try:
        since = parse_time(args.since, now)
        until = parse_time(getattr(args, "until", None), now) or now
    except ValueError as e:
        print(f"gpuwarden report usage: {e}", file=sys.stderr)
        return 2
    if getattr(args, "idle_util_below", None) is not None:
        settings.accounting.idle_util_below = args.idle_util_below
    with Spool(settings.spool.path) as spool:
        if getattr(args, "post", False):
            return _post(settings, spool, until)
        u = usage_from_spool(settings, spool, since=since or 0.0, until=until, by=args.by,
                             price=args.price_per_gpu_hour, slos=settings.engine.slo)
    sys.stdout.write(render(u, args.format, settings.accounting.currency))
    return 0


def _post(settings: Settings, spool: Spool, now: float) -> int:
    """``report usage --post``: the weekly digest, for a weekly cron job or timer."""
    try:
        outcome = asyncio.run(post_weekly_digest(settings, spool, now=now))
    except ValueError as e:
        print(f"gpuwarden report usage --post: {e}", file=sys.stderr)
        return 2
    if outcome is None:
        print("gpuwarden report usage --post: set accounting.digest_receiver to a receiver name",
              file=sys.stderr)
        return 2
    print(f"usage digest to {outcome.receiver}: {outcome.status} ({outcome.detail})", file=sys.stderr)
    return 0 if outcome.status != "failed" else 1


def digest_notification(u: Usage, receiver: str, currency: str = "",
                        sched: QueueReport | None = None) -> Notification:
    """The digest record (usage, and the scheduler's figures when ``sched`` has jobs) for ``receiver``."""
    return Notification(receiver=receiver, group_key="usage-digest", alerts=[digest_record(u, currency, sched)],
                        reason="new", at=u.until, id=f"usage-digest-{receiver}-{int(u.until)}")


async def post_weekly_digest(settings: Settings, spool: Spool, *, now: float,
                             delivery: Delivery | None = None) -> Outcome | None:
    """Post the last week's usage to ``accounting.digest_receiver`` through the notifiers' Delivery.

    Returns the delivery outcome (a receiver that is down gets it from the
    spool later, like any notification), or None when no receiver is configured.
    """
    receiver = settings.accounting.digest_receiver
    if not receiver:
        return None
    names = {r.name for r in settings.notify.receivers}
    if receiver not in names:
        raise ValueError(f"accounting.digest_receiver: no receiver named {receiver!r} "
                         f"in notify.receivers ({', '.join(sorted(names)) or 'none configured'})")
    note = digest_notification(weekly_usage(settings, spool, now, settings.engine.slo), receiver, settings.accounting.currency,
                               weekly_queues(settings, spool, now))
    if delivery is not None:
        return await delivery.deliver(note)
    own = Delivery(settings.notify.receivers, spool=spool, language=settings.language)
    try:
        return await own.deliver(note)
    finally:
        await own.aclose()
