"""The reports' tables as CSV and as text (rich), written once for every report of this room."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

#: One row: its key (user, project, ...) and its values by column; the last row is the total.
Row = tuple[str, dict[str, Any]]


def rounded(v: float) -> float:
    """Four significant digits, whole-number digits always kept: ``95.99999999989701`` → 96.0,
    ``0.0123456`` → 0.01235, ``123456.7`` → 123457.0 (what a spreadsheet reader wants; JSON keeps all)."""
    if v == 0 or not math.isfinite(v):
        return v
    return round(v, max(0, 3 - math.floor(math.log10(abs(v)))))


def to_csv(key: str, columns: Sequence[str], rows: Sequence[Row]) -> str:
    """The rows as CSV, floats :func:`rounded`."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([key, *columns])
    for name, v in rows:
        w.writerow([name, *("" if v[c] is None else rounded(v[c]) if isinstance(v[c], float) else v[c]
                            for c in columns)])
    return buf.getvalue()


def to_text(title: str, key: str, headers: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]],
            width: int = 110, total: bool = True) -> str:
    """A rich table rendered to plain text, the total (the last row, when ``total``) set apart."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    t.add_column(key)
    for h in headers:
        t.add_column(h, justify="right")
    for i, (name, cells) in enumerate(rows):
        t.add_row(name, *cells, end_section=total and i == len(rows) - 2)
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(t)
    return console.file.getvalue()  # type: ignore[attr-defined]
