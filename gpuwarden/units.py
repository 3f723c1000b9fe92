"""Human units in config and on the command line: ``90s``, ``15m``, ``2h``, ``14d``, ``1GiB``, and
points in time (``--start``, ``--since``, ``--until``), parsed one way for every command."""

from __future__ import annotations

import re
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import BeforeValidator

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_DUR_UNITS = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.I)
_SIZE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, None: 1,
}


def _parse(value: Any, pattern: re.Pattern[str], units: dict[str | None, float], kind: str,
           examples: str, lower: bool = False) -> float:
    """A non-negative number, or a number with one of ``units``; ValueError naming ``examples``."""
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind} such as {examples}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"expected a non-negative {kind}")
        return float(value)
    m = pattern.match(str(value))
    if not m:
        raise ValueError(f"expected a {kind} such as {examples}, got {value!r}")
    unit = m.group(2).lower() if lower and m.group(2) else m.group(2)
    return float(m.group(1)) * units[unit]


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``"15m"``; raises ValueError otherwise."""
    return _parse(value, _DUR, _DUR_UNITS, "duration", "30s, 15m, 2h or 14d")


def parse_size(value: Any) -> int:
    """Bytes from a number or a string such as ``"512MiB"``."""
    return int(_parse(value, _SIZE, _SIZE_UNITS, "size", "512MiB or 2GB", lower=True))


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


_EPOCH = re.compile(r"^\s*\d+(\.\d+)?\s*$")
_RELATIVE = re.compile(r"^\s*(?P<span>\d+(\.\d+)?\s*(ms|s|m|h|d|w))(\s+ago)?\s*$")


def parse_time(text: str | None, now: float) -> float | None:
    """A point in time → epoch seconds: ISO 8601, epoch seconds, or ``2h``/``7d`` (ago).

    A bare number is epoch seconds; a span needs its unit, so ``90`` is never mistaken for
    "90 seconds ago". An ISO time without an offset is UTC, whatever ``TZ`` says (the agent
    once read it as local time, ``run`` and ``replay`` as UTC: 8 h apart under Asia/Shanghai).
    ValueError otherwise.
    """
    if text is None:
        return None
    if _EPOCH.match(text):
        return float(text)
    if m := _RELATIVE.match(text):
        return now - parse_duration(m.group("span").replace(" ", ""))
    try:
        dt = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"expected a time such as 2026-05-01T12:00:00Z, 1746100800 or 2h (ago), got {text!r}"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()
