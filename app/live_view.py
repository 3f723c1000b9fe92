"""The live terminal view of ``gpuwarden run`` (rich): read at a glance, whatever the terminal's size.

A header (event-time clock, progress through ``--duration``, where alerts go) above panes
laid out by :class:`rich.layout.Layout`: open alerts, the key pane, first; GPUs; tasks with
their class baselines; then any registered panel. Every pane fits the rows it is given: it
shows what fits, most urgent first, and says how many it left out ("+ 12 more GPUs"); a row
is never cut, summaries wrap at word boundaries. Times are human ("6 h 57 min ago").

Another module adds a pane with one line::

    live_view.register(Pane("Scheduler queues", render_queues))

where ``render_queues(frame)`` returns the pane's rows, most important first: renderables,
or cell tuples with ``columns=(...)`` for a table.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.layout import Layout
from rich.padding import Padding
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text

from gpuwarden.app.display import band, fleet_words, urgency
from gpuwarden.app.scheduler_view import ALLOCATION_COLUMNS, QUEUE_COLUMNS, allocation_rows, queue_notes, queue_rows
from gpuwarden.app.serving_view import SERVICE_COLUMNS, service_rows
from gpuwarden.contract import AlertTransition
from gpuwarden.humantime import moment, relative, span
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.view import NodeView, node_view

_TIER_STYLE = {"critical": "bold red", "attention": "yellow", "info": "cyan"}
NOWHERE_LINE = "no receivers configured: shown here only — see gpuwarden test-notify"
#: Below this width the panes stack in one column.
WIDE = 140


@dataclass(frozen=True, slots=True)
class Status:
    """What the header says besides the engine's state: the run's span and where alerts go."""

    started: float | None = None
    """Event time the run started (for the progress of ``--duration``)."""
    duration: float | None = None
    receivers: tuple[str, ...] = ()
    zone: str = "UTC"
    notice: str | None = None
    """Said instead of where alerts go, when that is not the whole story (simulated alerts kept local)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One frame's inputs, handed to every pane."""

    engine: Engine
    now: float
    status: Status
    nodes: list[NodeView] = field(default_factory=list)
    alerts: list[AlertTransition] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Pane:
    """A titled pane. ``rows(frame)`` lists its rows, most important first: renderables, or cell
    tuples when ``columns`` names a table's columns. ``noun`` names them in the "+ N more" line;
    ``ratio`` is its share of the height."""

    title: str
    rows: Callable[[Frame], Sequence[Any]]
    noun: str = "rows"
    ratio: int = 1
    columns: tuple[str, ...] = ()
    wrap: tuple[str, ...] = ()
    """Columns whose text may wrap (at word boundaries); the others stay on one line."""
    optional: bool = False
    """Left out of the screen while it has no rows (a layer this run does not have)."""
    lead: Callable[[Frame], Sequence[str]] | None = None
    """Lines above the rows, across the pane's width (a cluster's note above its partitions)."""
    caption: Callable[[Frame], str] | None = None
    """Said after the title (the GPUs pane: the fleet's size, in the words the console uses)."""

    def fitted(self, frame: Frame) -> Fitted:
        return Fitted(self.rows(frame), self.columns, self.wrap, self.noun,
                      tuple(self.lead(frame)) if self.lead is not None else ())


GAP = 2  # spaces between a table's columns
MIN_WRAP = 24  # a wrapping column is not made narrower than this while a column can go instead


@dataclass(frozen=True, slots=True)
class Grid:
    """A pane's table laid out for a width: the columns that fit (the first ones: a narrow pane
    leaves the last out, never cuts a word), each one's width, and the columns left out."""

    columns: tuple[int, ...]
    widths: tuple[int, ...]
    left_out: tuple[str, ...]


def layout(columns: tuple[str, ...], rows: Sequence[tuple[str, ...]], wrap: tuple[str, ...], width: int) -> Grid:
    """Natural widths (the widest cell or heading); a wrapping column gives up its width first
    (down to ``MIN_WRAP``), then columns go from the right until the rest fit."""
    natural = [max([cell_len(c), *(cell_len(r[i]) for r in rows)]) for i, c in enumerate(columns)]
    floor = [min(n, MIN_WRAP) if c in wrap else n for c, n in zip(columns, natural)]
    keep = list(range(len(columns)))
    while len(keep) > 1 and sum(floor[i] for i in keep) + GAP * (len(keep) - 1) > width:
        keep.pop()
    widths = [natural[i] for i in keep]
    over = sum(widths) + GAP * (len(keep) - 1) - width
    for k, i in enumerate(keep):
        if over > 0 and columns[i] in wrap:
            cut = min(over, widths[k] - floor[i])
            widths[k] -= cut
            over -= cut
    if over > 0:  # one column alone wider than the pane: it wraps
        widths[0] = max(1, widths[0] - over)
    return Grid(tuple(keep), tuple(widths), tuple(columns[i] for i in range(len(columns)) if i not in keep))


def _cell_lines(text: str, width: int) -> list[str]:
    """A cell's lines at ``width``: wrapped at spaces, a word longer than the width split."""
    return [piece for line in textwrap.wrap(text, width, break_on_hyphens=False) or [""]
            for piece in ([line] if cell_len(line) <= width else textwrap.wrap(line, width, break_long_words=True))]


def grid_lines(grid: Grid, cells: Sequence[str], style: Style | None = None) -> list[list[Segment]]:
    """One table row as lines of segments, each column padded to its width."""
    parts = [_cell_lines(cells[i], w) for i, w in zip(grid.columns, grid.widths)]
    out = []
    for k in range(max(len(p) for p in parts)):
        line: list[Segment] = []
        for n, (p, w) in enumerate(zip(parts, grid.widths)):
            text = p[k] if k < len(p) else ""
            last = n == len(parts) - 1
            line.append(Segment(text + ("" if last else " " * (w - cell_len(text) + GAP)), style))
        out.append(line)
    return out


class Fitted:
    """The most rows that fit the height rich gives this pane, then "+ N more ..." (never a cut
    row), rendered in one pass: each row (or the table of the rows that could fit) is rendered
    once and the lines that fit are kept, never re-rendered to find what fits (#33: bisecting
    re-rendered the alert table several times a frame, ~40 % of a demo's CPU)."""

    def __init__(self, rows: Sequence[Any], columns: tuple[str, ...], wrap: tuple[str, ...], noun: str,
                 lead: tuple[str, ...] = ()) -> None:
        self.rows, self.columns, self.wrap, self.noun, self.lead = rows, columns, wrap, noun, lead

    def need(self) -> int:
        """About the lines it would take to show every row: a lead line may wrap once, a table may
        say which columns it left out (a wrapped row's extra lines are not counted)."""
        per_row = 2 if not self.columns else 1  # an alert: its line and its summary's
        lead = 2 * len(self.lead)
        return lead + (3 + len(self.rows) if self.columns and self.rows else per_row * len(self.rows) or 1)

    def least(self) -> int:
        """The lines that show one row (and "+ N more" when there are others)."""
        more = 1 if len(self.rows) > 1 else 0
        return len(self.lead) + (2 + 1 + more if self.columns and self.rows else 2 + more if self.rows else 1)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = options.height or console.height
        free = options.update(height=None)
        lines: list[list[Segment]] = []
        for note in self.lead:
            lines += console.render_lines(Text(note, style="dim"), free, pad=False)
        lines = lines[:height - (1 if self.rows else 0)]  # a line left for the rows, or "+ N more"
        if not self.rows:
            lines.append([Segment("none", Style(dim=True))])
        else:
            room = height - len(lines)
            kept, shown = (self._table if self.columns else self._group)(console, free, room)
            lines += kept
            if shown < len(self.rows):
                lines.append([Segment(f"+ {len(self.rows) - shown} more {self.noun}", Style(dim=True, italic=True))])
        for k, line in enumerate(lines[:height]):
            if k:
                yield Segment.line()
            yield from line

    def _group(self, console: Console, options: ConsoleOptions, room: int) -> tuple[list[list[Segment]], int]:
        """Rows rendered one by one until the next would not fit (with a line left for "+ N more")."""
        kept: list[list[Segment]] = []
        for i, row in enumerate(self.rows):
            more = 1 if i + 1 < len(self.rows) else 0
            rendered = console.render_lines(row, options, pad=False)
            if len(kept) + len(rendered) + more > room:
                return kept, i
            kept += rendered
        return kept, len(self.rows)

    def _table(self, console: Console, options: ConsoleOptions, room: int) -> tuple[list[list[Segment]], int]:
        """The rows that could fit (each takes a line at least) laid out under their headings, each
        row's lines made once, until the next would not fit; the headings only above a row."""
        candidates = self.rows[:max(0, room - 2)]
        grid = layout(self.columns, candidates, self.wrap, options.max_width)
        kept = grid_lines(grid, self.columns, Style(bold=True))
        kept.append([Segment("─" * options.max_width, Style(dim=True))])
        shown, budget = 0, room - (1 if grid.left_out else 0)
        for i, row in enumerate(candidates):
            more = 1 if i + 1 < len(self.rows) else 0
            lines = grid_lines(grid, row)
            if len(kept) + len(lines) + more > budget:
                break
            kept += lines
            shown = i + 1
        if shown and grid.left_out:
            kept.append([Segment(f"(too narrow for: {', '.join(grid.left_out)})", Style(dim=True))])
        return (kept if shown else []), shown


def alert_rows(frame: Frame) -> list[RenderableType]:
    """Each open alert: tier, rule, where and since on one line, the summary wrapped beneath."""
    out: list[RenderableType] = []
    for a in frame.alerts:
        where = " ".join(f"{k}={a.labels[k]}" for k in ("node", "gpu", "task", "service") if k in a.labels)
        head = Text.assemble((f"{a.tier.value.upper():10}", _TIER_STYLE[a.tier.value]), (a.rule, "bold"), "  ",
                             (where, "cyan"), "  ", (f"since {relative(a.started_at, frame.now)}", "dim"))
        out.append(Group(head, Padding(Text(a.summary), (0, 0, 0, 2))))
    return out


def _fmt(v: float | None, spec: str = ".0f") -> str:
    return "-" if v is None else format(v, spec)


def gpu_rows(frame: Frame) -> list[tuple[str, ...]]:
    """GPUs with an open alert first, then by node and index."""
    alerted = {(a.labels.get("node"), a.labels.get("gpu")) for a in frame.alerts}
    rows = []
    for view in frame.nodes:
        for g in view.gpus:
            val = g.latest.get
            rows.append(((view.node, str(g.index)) not in alerted, view.node, g.index, (
                view.node, str(g.index), _fmt(val("util_gpu")), _fmt(val("mem_used_gib"), ".1f"),
                _fmt(val("temp_gpu_c")), _fmt(val("power_w")), g.labels.get("task", ""), g.labels.get("user", ""))))
    rows.sort(key=lambda r: r[:3])
    return [r[3] for r in rows]


def task_rows(frame: Frame) -> list[tuple[str, ...]]:
    out = []
    for view in frame.nodes:
        for t in view.tasks:
            cls = t.labels.get("task_class", "")
            shown = band("util_gpu", frame.engine.classes.baseline(cls).get("util_gpu")) if cls else "-"
            out.append((view.node, t.task_id, cls, str(t.gpus), shown))
    return out


PANES: list[Pane] = [
    Pane("Open alerts", alert_rows, "alerts: see gpuwarden web", ratio=3),
    Pane("GPUs", gpu_rows, "GPUs", ratio=2, caption=lambda frame: fleet_words(frame.nodes, names=False),
         columns=("node", "gpu", "util %", "mem GiB", "temp °C", "power W", "task", "user")),
    Pane("Tasks and class baselines", task_rows, "tasks", ratio=2,
         columns=("node", "task", "class", "GPUs", "class util % (band)"), wrap=("class util % (band)",)),
    Pane("Inference services (last hour)", lambda frame: service_rows(frame.engine), "services", ratio=1,
         columns=SERVICE_COLUMNS, wrap=("budget left",), optional=True),
    # the scheduler stage (#19): left out while no cluster was heard from
    Pane("Scheduler queues", lambda frame: queue_rows(frame.engine), "partitions", ratio=1,
         columns=QUEUE_COLUMNS, optional=True, lead=lambda frame: queue_notes(frame.engine)),
    Pane("Allocated vs used (scheduler jobs)", lambda frame: allocation_rows(frame.engine), "jobs", ratio=1,
         columns=ALLOCATION_COLUMNS, optional=True),
]
"""The alerts pane first: it is the one that must always be there."""


def register(pane: Pane) -> None:
    """Add a pane below the others (the scheduler and inference views do this)."""
    PANES.append(pane)


def header(frame: Frame) -> RenderableType:
    st = frame.status
    clock = Text.assemble(("event time ", "dim"), (moment(frame.now, st.zone, seconds=True), "bold"))
    parts: list[RenderableType] = []
    if st.duration and st.started is not None:
        done = min(max(frame.now - st.started, 0.0), st.duration)
        bar = Table.grid(expand=True, padding=(0, 1))
        bar.add_column(no_wrap=True)
        bar.add_column(ratio=1)
        bar.add_column(no_wrap=True)
        bar.add_row(clock, ProgressBar(total=st.duration, completed=done),
                    Text(f"{span(done)} of {span(st.duration)}"))
        parts.append(bar)
    else:
        parts.append(clock)
    if st.notice:
        parts.append(Text(st.notice, style="bold yellow"))
    elif st.receivers:
        parts.append(Text(f"alerts go to: {', '.join(st.receivers)}", style="green"))
    else:
        parts.append(Text(NOWHERE_LINE, style="bold yellow"))
    return Group(*parts)


def frame_of(engine: Engine, now: float, status: Status) -> Frame:
    nodes = [node_view(st) for n in engine.nodes.nodes() if (st := engine.nodes.state(n)) is not None]
    return Frame(engine, now, status, nodes, sorted(engine.open_alerts(), key=urgency))


class Screen:
    """The layout drawn one row short of the terminal, so the live display never scrolls."""

    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = max(12, (options.height or console.height) - 1)
        yield from console.render(self.layout, options.update(height=height))


@dataclass(frozen=True, slots=True)
class Placed:
    """A pane as the body places it: its panel, the lines it would like, the least that shows a
    row, its share of the rest."""

    panel: Panel
    need: int
    least: int
    ratio: int


COMPACT = 3  # a pane too short for a row: its border and its "+ N more" line


def _shares(panes: Sequence[Placed], total: int) -> list[int]:
    """Each pane what it needs while that is less than its share (by ratio), the rest by ratio."""
    out = [0] * len(panes)
    left, open_ = total, list(range(len(panes)))
    while open_:
        ratios = sum(panes[i].ratio for i in open_)
        small = [i for i in open_ if panes[i].need <= left * panes[i].ratio // ratios]
        if not small:
            for i in open_:
                out[i] = left * panes[i].ratio // ratios
            out[open_[0]] += left - sum(out[i] for i in open_)  # the rounding's lines to the first
            break
        for i in small:
            out[i] = panes[i].need
            left -= panes[i].need
            open_.remove(i)
    if not open_ and panes:  # every pane got its (estimated) need: the rest to the first, never left blank below
        out[0] += left
    return out


def heights(panes: Sequence[Placed], total: int) -> list[int]:
    """Each pane's height in ``total`` lines: no pane gets lines it leaves blank while another
    says "+ N more"; one that could not show a single row is drawn compact (its "+ N more"
    line) and its lines go to the others."""
    out = _shares(panes, total)
    compact = {i for i, h in enumerate(out) if h < panes[i].least}
    if not compact or len(compact) == len(panes):
        return out
    rest = [i for i in range(len(panes)) if i not in compact]
    for i, h in zip(rest, _shares([panes[i] for i in rest], max(0, total - COMPACT * len(compact)))):
        out[i] = h
    for i in compact:
        out[i] = COMPACT
    return out


class Body:
    """The panes, laid out at draw time: two columns (alerts left) on a wide terminal, one otherwise."""

    def __init__(self, panes: list[Placed]) -> None:
        self.panes = panes

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        height = options.height or console.height

        def column(panes: Sequence[Placed]) -> list[Layout]:
            return [Layout(p.panel, size=h) for p, h in zip(panes, heights(panes, height)) if h]

        grid = Layout()
        if options.max_width >= WIDE:
            side = Layout(name="side")
            side.split_column(*column(self.panes[1:]))
            grid.split_row(Layout(self.panes[0].panel, name="alerts"), side)
        else:
            grid.split_column(*column(self.panes))
        yield from console.render(grid, options)


def render(engine: Engine, now: float, status: Status | None = None) -> Screen:
    """One frame, built from the engine's read-only views, so it shows exactly what the rules see."""
    frame = frame_of(engine, now, status or Status())
    built = [(p, p.fitted(frame)) for p in PANES]
    panes = [Placed(Panel(f, title=p.title + (f" · {p.caption(frame)}" if p.caption else ""), title_align="left",
                          box=box.ROUNDED), f.need() + 2, f.least() + 2, p.ratio)
             for p, f in built if f.rows or not p.optional]
    root = Layout()
    root.split_column(Layout(header(frame), name="header", size=2), Layout(Body(panes), name="body"))
    return Screen(root)
