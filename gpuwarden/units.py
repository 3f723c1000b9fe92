"""Human units in config and on the command line: ``90s``, ``15m``, ``2h``, ``14d``, ``1GiB``."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BeforeValidator

_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_DUR_UNITS = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)?\s*$", re.I)
_SIZE_UNITS = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, None: 1,
}


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``"15m"``; raises ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30s, 15m, 2h or 14d")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("expected a non-negative duration")
        return float(value)
    m = _DUR.match(str(value))
    if not m:
        raise ValueError(f"expected a duration such as 30s, 15m, 2h or 14d, got {value!r}")
    return float(m.group(1)) * _DUR_UNITS[m.group(2)]


def parse_size(value: Any) -> int:
    """Bytes from a number or a string such as ``"512MiB"``."""
    if isinstance(value, bool):
        raise ValueError("expected a size such as 512MiB or 2GB")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("expected a non-negative size")
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"expected a size such as 512MiB or 2GB, got {value!r}")
    unit = m.group(2).lower() if m.group(2) else None
    return int(float(m.group(1)) * _SIZE_UNITS[unit])


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]
