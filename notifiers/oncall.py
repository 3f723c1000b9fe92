"""Who is on call at a given moment: a daily or weekly rotation, bent by overrides.

Pure: the time is an argument, so the same question gives the same answer in a
replay. Overrides come from the config and from the control state
(``OnCallOverride`` records); the most recently started override that covers
the moment wins, as a swap agreed last supersedes earlier ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from gpuwarden.notifiers.config import ScheduleConfig

PERIOD_S = {"daily": 86400.0, "weekly": 7 * 86400.0}


@dataclass(frozen=True, slots=True)
class Cover:
    """One override: ``user`` covers [starts_at, ends_at)."""

    user: str
    starts_at: float
    ends_at: float


def on_call(schedule: ScheduleConfig, now: float, overrides: Iterable[Cover] = ()) -> str:
    """The person on call at ``now`` (before ``start`` the rotation counts backwards)."""
    covering = [o for o in (*_config_covers(schedule), *overrides) if o.starts_at <= now < o.ends_at]
    if covering:
        return max(covering, key=lambda o: o.starts_at).user
    turn = math.floor((now - schedule.start) / PERIOD_S[schedule.rotation])
    return schedule.users[turn % len(schedule.users)]


def _config_covers(schedule: ScheduleConfig) -> list[Cover]:
    return [Cover(o.user, o.starts_at, o.ends_at) for o in schedule.overrides]
