"""The reports' tables as CSV and as text (rich), written once for every report of this room."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

#: One row: its key (user, project, ...) and its values by column; the last row is the total.
Row = tuple[str, dict[str, Any]]


def to_csv(key: str, columns: Sequence[str], rows: Sequence[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([key, *columns])
    for name, v in rows:
        w.writerow([name, *("" if v[c] is None else v[c] for c in columns)])
    return buf.getvalue()


def to_text(title: str, key: str, headers: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]],
            width: int = 110) -> str:
    """A rich table rendered to plain text, the total (the last row) set apart."""
    from rich.console import Console
    from rich.table import Table

    t = Table(title=title)
    t.add_column(key)
    for h in headers:
        t.add_column(h, justify="right")
    for i, (name, cells) in enumerate(rows):
        t.add_row(name, *cells, end_section=i == len(rows) - 2)
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(t)
    return console.file.getvalue()  # type: ignore[attr-defined]
