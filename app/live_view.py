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
from rich.text import Text

from gpuwarden.app.display import band, urgency
from gpuwarden.app.scheduler_view import ALLOCATION_COLUMNS, QUEUE_COLUMNS, allocation_rows, queue_rows
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

    def build(self, frame: Frame) -> tuple[Callable[[int], RenderableType], int]:
        """(the first k rows as one renderable, how many rows there are)."""
        rows = self.rows(frame)
        if not self.columns:
            return (lambda k: Group(*rows[:k])), len(rows)
        return (lambda k: _table(self.columns, rows[:k], self.wrap)), len(rows)


def _table(columns: tuple[str, ...], rows: Sequence[tuple[str, ...]], wrap: tuple[str, ...]) -> Table:
    t = Table(box=box.SIMPLE_HEAD, expand=True, pad_edge=False, show_edge=False)
    for col in columns:
        t.add_column(col, no_wrap=col not in wrap, overflow="fold")
    for r in rows:
        t.add_row(*r)
    return t


class Fitted:
    """The most rows that fit the height rich gives this pane, then "+ N more ..." (never a cut row)."""

    def __init__(self, build: Callable[[int], RenderableType], total: int, noun: str) -> None:
        self.build, self.total, self.noun = build, total, noun

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if self.total == 0:
            yield Text("none", style="dim")
            return
        height = options.height or console.height
        free = options.update(height=None)

        def fits(k: int) -> bool:
            more = 1 if k < self.total else 0
            return len(console.render_lines(self.build(k), free, pad=False)) + more <= height

        lo, hi = 0, self.total  # the largest k that fits, by bisection (rows only add lines)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        parts: list[RenderableType] = [self.build(lo)] if lo else []
        if lo < self.total:
            parts.append(Text(f"+ {self.total - lo} more {self.noun}", style="dim italic"))
        yield Group(*parts)


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
    Pane("GPUs", gpu_rows, "GPUs", ratio=2,
         columns=("node", "gpu", "util %", "mem GiB", "temp °C", "power W", "task", "user")),
    Pane("Tasks and class baselines", task_rows, "tasks", ratio=2,
         columns=("node", "task", "class", "GPUs", "class util % (band)"), wrap=("class util % (band)",)),
    Pane("Inference services (last hour)", lambda frame: service_rows(frame.engine), "services", ratio=1,
         columns=SERVICE_COLUMNS, wrap=("budget left",), optional=True),
    # the scheduler stage (#19): left out while no cluster was heard from
    Pane("Scheduler queues", lambda frame: queue_rows(frame.engine), "partitions", ratio=1,
         columns=QUEUE_COLUMNS, wrap=("cluster notes",), optional=True),
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


class Body:
    """The panes, laid out at draw time: two columns (alerts left) on a wide terminal, one otherwise."""

    def __init__(self, panes: list[Layout]) -> None:
        self.panes = panes

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        grid = Layout()
        if options.max_width >= WIDE:
            side = Layout(name="side")
            side.split_column(*self.panes[1:])
            grid.split_row(Layout(self.panes[0].renderable, name="alerts"), side)
        else:
            grid.split_column(*self.panes)
        yield from console.render(grid, options)


def render(engine: Engine, now: float, status: Status | None = None) -> Screen:
    """One frame, built from the engine's read-only views, so it shows exactly what the rules see."""
    frame = frame_of(engine, now, status or Status())
    built = [(p, p.build(frame)) for p in PANES]
    panes = [Layout(Panel(Fitted(*b, p.noun), title=p.title, title_align="left", box=box.ROUNDED),
                    name=p.title, ratio=p.ratio) for p, b in built if b[1] or not p.optional]
    root = Layout()
    root.split_column(Layout(header(frame), name="header", size=2), Layout(Body(panes), name="body"))
    return Screen(root)
