"""Times as people read them: ``6 h 57 min ago``, ``in about 24 min``, ``2026-12-01 13:05 UTC``.

The terminal view, the web console and the replay output all show ages and
moments; raw seconds ("21414 s ago") and epoch numbers make a reader do
arithmetic, so every display goes through here.
"""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo


#: The words for seconds, minutes, hours and days (a translation passes its own).
UNITS = ("s", "min", "h", "d")


def span(seconds: float, units: tuple[str, str, str, str] = UNITS) -> str:
    """``45 s``, ``1 min 50 s``, ``12 min``, ``6 h 57 min``, ``3 d 4 h``: the two largest units
    it has, the larger first, so a span is never cut to a coarser unit than it needs
    (109.5 s is ``1 min 50 s``, not ``1 min``); below the second unit, whole units."""
    sec, mins, hours, days = units
    s = int(round(abs(seconds)))
    if s < 60:
        return f"{s} {sec}"
    if s < 3600:
        m, r = divmod(s, 60)
        return f"{m} {mins} {r} {sec}" if r else f"{m} {mins}"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h} {hours} {m} {mins}" if m else f"{h} {hours}"
    d, h = divmod(s // 3600, 24)
    return f"{d} {days} {h} {hours}" if h else f"{d} {days}"


def ago(seconds: float) -> str:
    """An age: ``just now`` under a second, ``6 h 57 min ago``; a negative age reads ``in about ...``."""
    if seconds < 0:
        return until(-seconds)
    return "just now" if seconds < 1 else f"{span(seconds)} ago"


def until(seconds: float) -> str:
    """A time to come: ``in about 24 min`` (``now`` when it is due)."""
    return "now" if seconds < 1 else f"in about {span(seconds)}"


def relative(ts: float, now: float) -> str:
    """``ts`` seen from ``now``: an age or a time to come."""
    return ago(now - ts)


def moment(ts: float, zone: str = "UTC", seconds: bool = False) -> str:
    """A wall-clock moment in ``zone`` (an IANA name), with the zone's abbreviation."""
    tz = timezone.utc if zone == "UTC" else ZoneInfo(zone)
    dt = datetime.fromtimestamp(ts, tz)
    return dt.strftime("%Y-%m-%d %H:%M:%S %Z" if seconds else "%Y-%m-%d %H:%M %Z")
