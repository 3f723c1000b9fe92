"""The incident retro report: one self-contained HTML file (plots embedded as base64 PNG).

It opens offline and can be attached to a ticket: no scripts, no fonts, no
URLs.  Sections have stable ids (``overview``, ``memory``, ``utilization``,
``thermal``, ``timeline``, ``alerts``, ``serving``: the inference services' throughput and
each SLO's error budget left) so tests and links can find them.
Plots focus on the GPUs the alerts name (then the busiest others), since a
fleet's worth of lines says nothing.  Needs the ``report`` extra (matplotlib).
"""

from __future__ import annotations

import base64
import html
import io
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.alert_text import is_update
from gpuwarden.contract import (
    AlertState,
    AlertTransition,
    Baseline,
    Evidence,
    GpuEvent,
    InferenceMetrics,
    NodeSnapshot,
    TaskMetric,
    TaskMetricKind,
)
from gpuwarden.history.serving import serving_rows
from gpuwarden.slo import ServiceSlo, service_budgets

SECTIONS = ("overview", "memory", "utilization", "thermal", "timeline", "alerts", "serving")
MAX_GPUS = 6
TIER_COLOURS = {"info": "#6c8ebf", "attention": "#e3a21a", "critical": "#c0392b"}
GIB = float(1 << 30)

GpuKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ReportHelpers:
    """What the report borrows from another room, handed in by the composition root: the
    notifiers' ``evidence`` wording, so the report says what the chat message says. This room
    does not import it."""

    evidence: Callable[[Evidence], list[str]]


@dataclass(frozen=True, slots=True)
class Trend:
    """A memory rule's own trend, drawn where it judged it: the slope its evidence gives over the
    window that ended when it fired (not whatever the last minutes of data show)."""

    key: GpuKey
    rule: str
    start: float
    end: float
    gib_per_s: float
    anchor_ts: float  # the line passes through the window's mean sample
    anchor_gib: float

    def at(self, ts: float) -> float:
        return self.anchor_gib + self.gib_per_s * (ts - self.anchor_ts)


@dataclass(slots=True)
class GpuSeries:
    """One GPU's samples over the replay, in event time."""

    ts: list[float] = field(default_factory=list)
    mem_gib: list[float | None] = field(default_factory=list)
    util: list[float | None] = field(default_factory=list)
    temp: list[float | None] = field(default_factory=list)
    power: list[float | None] = field(default_factory=list)
    clock: list[float | None] = field(default_factory=list)
    tasks: Counter[str] = field(default_factory=Counter)

    @property
    def task_class(self) -> str | None:
        return self.tasks.most_common(1)[0][0] if self.tasks else None


@dataclass(slots=True)
class Incident:
    """What the report is drawn from."""

    series: dict[GpuKey, GpuSeries]
    events: list[GpuEvent]
    metrics: list[TaskMetric]
    inference: list[InferenceMetrics]
    transitions: list[AlertTransition]
    first_ts: float
    last_ts: float


def collect(records: Iterable[Any], transitions: list[AlertTransition]) -> Incident:
    series: dict[GpuKey, GpuSeries] = defaultdict(GpuSeries)
    events: list[GpuEvent] = []
    metrics: list[TaskMetric] = []
    inference: list[InferenceMetrics] = []
    times: list[float] = []
    for r in records:
        times.append(r.ts)
        if isinstance(r, NodeSnapshot):  # read by column: a row object per GPU costs more than the rest
            procs, g = r.processes, r.gpus
            owners = {i: task for i, task in zip(procs.gpu_index, procs.task) if task}
            for index, mem, util, temp, power, clock in zip(g.index, g.mem_used_bytes, g.util_gpu, g.temp_gpu_c,
                                                            g.power_w, g.clock_sm_mhz):
                s = series[(r.node, index)]
                s.ts.append(r.ts)
                s.mem_gib.append(None if mem is None else mem / GIB)
                s.util.append(util)
                s.temp.append(temp)
                s.power.append(power)
                s.clock.append(None if clock is None else float(clock))
                if index in owners:
                    s.tasks[owners[index]] += 1
        elif isinstance(r, GpuEvent):
            events.append(r)
        elif isinstance(r, TaskMetric):
            metrics.append(r)
        elif isinstance(r, InferenceMetrics):
            inference.append(r)
    times += [t.ts for t in transitions]
    first, last = (min(times), max(times)) if times else (0.0, 0.0)
    return Incident(dict(series), events, metrics, inference, transitions, first, last)


def _gpu_of(labels: dict[str, str]) -> GpuKey | None:
    node, gpu = labels.get("node"), labels.get("gpu")
    if node is None or gpu is None or not str(gpu).isdigit():
        return None
    return node, int(gpu)


def focus(inc: Incident, limit: int = MAX_GPUS) -> list[GpuKey]:
    """The GPUs alerts name (most alerted first), then the ones holding the most memory."""
    named = Counter(k for t in inc.transitions if (k := _gpu_of(t.labels)) in inc.series)
    picked = [k for k, _ in named.most_common()]
    rest = sorted((k for k in inc.series if k not in named),
                  key=lambda k: -max((v for v in inc.series[k].mem_gib if v is not None), default=0.0))
    return (picked + rest)[:limit]


# --------------------------------------------------------------------------- plots


def _mpl() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("the retro report needs matplotlib: pip install 'gpuwarden[report]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _dates(ts: Iterable[float]) -> list[Any]:
    from datetime import datetime, timezone

    return [datetime.fromtimestamp(t, timezone.utc) for t in ts]


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    _mpl().close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _legend_right(ax: Any) -> None:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _label(k: GpuKey, s: GpuSeries) -> str:
    return f"{k[0]} gpu{k[1]}" + (f" ({s.task_class})" if s.task_class else "")


def _present(ts: list[float], ys: list[float | None]) -> tuple[list[float], list[float]]:
    pairs = [(t, y) for t, y in zip(ts, ys) if y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


_PER_S = {"GiB/h": 1 / 3600.0, "GiB/min": 1 / 60.0, "GiB/s": 1.0}


def memory_trends(inc: Incident, keys: Iterable[GpuKey]) -> list[Trend]:
    """Each memory alert's trend on these GPUs, from its firing transition's evidence."""
    keys = set(keys)
    out = []
    for t in inc.transitions:
        key, ev = _gpu_of(t.labels), t.evidence
        scale = _PER_S.get(ev.slope_unit or "")
        if t.state != AlertState.FIRING or key not in keys or ev.slope is None or not ev.window_s or scale is None:
            continue
        start = t.ts - ev.window_s
        pts = [(x, y) for x, y in zip(*_present(inc.series[key].ts, inc.series[key].mem_gib)) if start <= x <= t.ts]
        if not pts:
            continue
        out.append(Trend(key, t.rule, start, t.ts, ev.slope * scale, sum(x for x, _ in pts) / len(pts),
                         sum(y for _, y in pts) / len(pts)))
    return out


@dataclass(frozen=True, slots=True)
class Checkpoint:
    node: str
    begin: float
    end: float | None  # None: no end seen


def checkpoints(inc: Incident, nodes: set[str]) -> list[Checkpoint]:
    """Checkpoint spans from the task SDK's begin/end records, per node in time order."""
    out: list[Checkpoint] = []
    open_: dict[tuple[str, str], float] = {}
    for m in sorted(inc.metrics, key=lambda m: m.ts):
        if m.node not in nodes:
            continue
        if m.kind == TaskMetricKind.CHECKPOINT_BEGIN:
            open_.setdefault((m.node, m.task_id), m.ts)
        elif m.kind == TaskMetricKind.CHECKPOINT_END and (b := open_.pop((m.node, m.task_id), None)) is not None:
            out.append(Checkpoint(m.node, b, m.ts))
    out += [Checkpoint(node, b, None) for (node, _), b in open_.items()]
    return sorted(out, key=lambda c: c.begin)


#: More checkpoints than this on one chart are drawn as a rug of ticks, not full-height spans.
CHECKPOINT_SPANS_MAX = 24


def plot_memory(inc: Incident, keys: list[GpuKey]) -> str:
    """Memory used per GPU, each memory alert's own trend over its window, checkpoints."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(10, 3.8))
    colours = {}
    for k in keys:
        s = inc.series[k]
        ts, ys = _present(s.ts, s.mem_gib)
        if ts:
            (line,) = ax.plot(_dates(ts), ys, label=_label(k, s), linewidth=1.4)
            colours[k] = line.get_color()
    for tr in memory_trends(inc, keys):
        ax.plot(_dates([tr.start, tr.end]), [tr.at(tr.start), tr.at(tr.end)], linestyle="--",
                color=colours.get(tr.key, "black"), linewidth=2.2,
                label=f"{tr.rule} on {tr.key[0]} gpu{tr.key[1]}: {tr.gib_per_s * 3600:+.1f} GiB/h over its window")
    spans = checkpoints(inc, {k[0] for k in keys})
    if len(spans) <= CHECKPOINT_SPANS_MAX:
        for i, c in enumerate(spans):
            d0, d1 = _dates([c.begin, c.end if c.end is not None else c.begin])
            ax.axvspan(d0, d1, color="#2e8b57", alpha=0.15, linewidth=0, label="checkpoint" if i == 0 else None)
    elif spans:  # a rug along the bottom: legible at 15 days of hourly checkpoints too
        ax.plot(_dates([c.begin for c in spans]), [0] * len(spans), linestyle="none", marker="|",
                markersize=9, color="#2e8b57", label=f"checkpoints ({len(spans)})")
    ax.set_ylabel("memory used (GiB)")
    ax.set_title("GPU memory, each memory alert's trend over its own window, checkpoints")
    _legend_right(ax)
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_utilization(inc: Incident, keys: list[GpuKey],
                     baselines: dict[str, dict[str, Baseline | None]]) -> str:
    """Utilization per GPU, one panel per task class, with the class's baseline band."""
    plt = _mpl()
    classes: dict[str | None, list[GpuKey]] = defaultdict(list)
    for k in keys:
        classes[inc.series[k].task_class].append(k)
    fig, axes = plt.subplots(len(classes), 1, figsize=(10, 2.6 * len(classes)), squeeze=False, sharex=True)
    for ax, (cls, ks) in zip(axes[:, 0], sorted(classes.items(), key=lambda c: str(c[0]))):
        for k in ks:
            ts, ys = _present(inc.series[k].ts, inc.series[k].util)
            ax.plot(_dates(ts), ys, label=_label(k, inc.series[k]), linewidth=1.2)
        b = _util_band(cls, baselines)
        if b is not None:
            ax.axhspan(b.low, b.high, color="#6c8ebf", alpha=0.18, label=f"{cls} baseline band")
            ax.axhline(b.median, color="#6c8ebf", linestyle="--", linewidth=1, label="baseline median")
        ax.set_title(f"{cls or 'unattributed'}: {band_note(cls, baselines)}", fontsize=9)
        ax.set_ylim(-2, 102)
        ax.set_ylabel("util %")
        _legend_right(ax)
        ax.grid(alpha=0.3)
    return _png(fig)


def _util_band(cls: str | None, baselines: dict[str, dict[str, Baseline | None]]) -> Baseline | None:
    return baselines.get(cls or "", {}).get("util_gpu")


def band_note(cls: str | None, baselines: dict[str, dict[str, Baseline | None]]) -> str:
    """What the utilization panel of a task class is judged against, in words."""
    b = _util_band(cls, baselines)
    if b is not None:
        return f"baseline {b.low:.0f}–{b.high:.0f}% (median {b.median:.0f}%, n={b.samples})"
    return "no baseline yet (learning)" if cls else "no task on these GPUs"


def plot_thermal(inc: Incident, keys: list[GpuKey]) -> str:
    """Temperature, power and SM clock per GPU on a shared time axis."""
    plt = _mpl()
    fig, axes = plt.subplots(3, 1, figsize=(10, 6.5), sharex=True)
    for ax, attr, unit in zip(axes, ("temp", "power", "clock"), ("°C", "W", "MHz")):
        for k in keys:
            s = inc.series[k]
            ts, ys = _present(s.ts, getattr(s, attr))
            ax.plot(_dates(ts), ys, label=_label(k, s), linewidth=1.2)
        ax.set_ylabel({"temp": "temperature", "power": "power", "clock": "SM clock"}[attr] + f" ({unit})")
        ax.grid(alpha=0.3)
    _legend_right(axes[0])
    axes[0].set_title("Temperature, power and clocks")
    return _png(fig)


def timeline_label(row: str, rules: list[str], most: int = 3) -> str:
    """A timeline row's name with the rules that fired on it, so a bar says what it was
    (names on the bars overlapped where alerts were close)."""
    if not rules:
        return row
    shown = ", ".join(rules[:most]) + (f" +{len(rules) - most}" if len(rules) > most else "")
    return f"{row}: {shown}"


def plot_timeline(inc: Incident) -> str:
    """Per node and GPU: hardware events as markers, alerts as bars from firing to resolved."""
    plt = _mpl()
    rows: set[str] = set()

    def row(node: str | None, gpu: Any) -> str:
        if node is None:
            name = "(job / fleet)"
        else:
            name = f"{node} gpu{gpu}" if gpu is not None else f"{node} (node)"
        rows.add(name)
        return name

    spans: list[tuple[str, float, float, str]] = []
    rules: dict[str, list[str]] = defaultdict(list)  # row -> the rules that fired on it, in order
    opened: dict[str, AlertTransition] = {}

    def span(f: AlertTransition, end: float) -> None:
        name = row(f.labels.get("node"), f.labels.get("gpu"))
        spans.append((name, f.ts, end, f.tier.value))
        if f.rule not in rules[name]:
            rules[name].append(f.rule)

    for t in sorted(inc.transitions, key=lambda t: t.ts):
        if t.state == AlertState.FIRING:
            opened.setdefault(t.fingerprint, t)  # an update leaves the span where the episode began
        elif (f := opened.pop(t.fingerprint, None)) is not None:
            span(f, t.ts)
    for f in opened.values():
        span(f, inc.last_ts)
    marks = [(row(e.node, e.gpu_index), e.ts, e.kind.value + (f" {e.code}" if e.code is not None else ""))
             for e in inc.events]
    order = sorted(rows)
    y = {name: i for i, name in enumerate(order)}
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.45 * max(1, len(order))))
    from matplotlib.dates import date2num

    for name, start, end, tier in spans:
        d0, d1 = date2num(_dates([start, max(end, start + 30)]))
        ax.broken_barh([(d0, d1 - d0)], (y[name] - 0.3, 0.6), color=TIER_COLOURS[tier], alpha=0.85)
    # Name each kind of event once per row, not every repeat; kinds first seen in the
    # same minute share one label instead of printing over each other.
    labels: dict[tuple[str, int], list[str]] = defaultdict(list)
    seen: set[tuple[str, str]] = set()
    for name, ts, text in marks:
        ax.plot(_dates([ts]), [y[name]], marker="x", color="black", markersize=7)
        if (name, text) not in seen:
            seen.add((name, text))
            labels[(name, int(ts // 60))].append(text)
    for (name, minute), texts in labels.items():
        ax.annotate(", ".join(texts), (date2num(_dates([minute * 60.0]))[0], y[name] + 0.32), fontsize=6)
    for tier, colour in TIER_COLOURS.items():
        ax.plot([], [], color=colour, linewidth=6, label=f"alert: {tier}")
    ax.plot([], [], marker="x", color="black", linestyle="none", label="event")
    ax.set_yticks(range(len(order)), [timeline_label(name, rules.get(name, [])) for name in order], fontsize=8)
    ax.set_ylim(-0.7, max(1, len(order)) - 0.3)
    ax.set_xlim(_dates([inc.first_ts, max(inc.last_ts, inc.first_ts + 60)]))
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
    ax.set_title("Events and alerts per node and GPU")
    ax.grid(alpha=0.3, axis="x")
    return _png(fig)


# --------------------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1100px;color:#222;padding:0 16px}
h1{font-size:22px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:28px}
img{max-width:100%;display:block;margin:8px 0}
table{border-collapse:collapse;width:100%;font-size:12.5px} td,th{border:1px solid #ddd;padding:4px 6px;
vertical-align:top;text-align:left} th{background:#f4f4f4}
.tier{font-weight:600;border-radius:3px;padding:1px 5px;color:#fff}
.info{background:#6c8ebf}.attention{background:#e3a21a}.critical{background:#c0392b}
.muted{color:#777} dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px}
"""


def _when(ts: float | None) -> str:
    return "—" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ts))


def _evidence(t: AlertTransition, helpers: ReportHelpers) -> str:
    parts = helpers.evidence(t.evidence)
    return "<br>".join(html.escape(p) for p in parts) or '<span class="muted">none</span>'


def _alert_rows(transitions: list[AlertTransition], helpers: ReportHelpers) -> str:
    rows = []
    for t in sorted(transitions, key=lambda t: (t.ts, t.fingerprint)):
        labels = ", ".join(f"{k}={v}" for k, v in sorted(t.labels.items()))
        rows.append(
            f"<tr><td>{_when(t.ts)}</td><td><span class='tier {t.tier.value}'>{t.tier.value}</span> "
            f"{t.state.value}</td><td>{html.escape(t.rule)}</td><td>{html.escape(labels)}</td>"
            f"<td>{html.escape(t.summary)}</td><td>{_evidence(t, helpers)}</td>"
            f"<td>{html.escape(t.action if t.state == AlertState.FIRING else '')}</td></tr>")
    head = ("<tr><th>when</th><th>tier / state</th><th>rule</th><th>labels</th><th>summary</th>"
            "<th>evidence</th><th>recommended action</th></tr>")
    body = "".join(rows) or "<tr><td colspan=7 class='muted'>no alert transitions</td></tr>"
    return f"<table>{head}{body}</table>"


def _band_list(inc: Incident, keys: list[GpuKey], baselines: dict[str, dict[str, Baseline | None]]) -> str:
    classes = sorted({c for k in keys if (c := inc.series[k].task_class)})
    items = "".join(f"<li>{html.escape(c)}: {html.escape(band_note(c, baselines))}</li>" for c in classes)
    return f"<ul class='bands'>{items}</ul>"


def _serving(inc: Incident, slos: Mapping[str, ServiceSlo]) -> str:
    """The services replayed: throughput, and each declared SLO's budget over its window
    ending at the replay's end (said over how much of the window the replay covers)."""
    if not inc.inference:
        return "<p class='muted'>no inference records</p>"
    rows = "".join(f"<tr><td>{html.escape(r.service)}</td><td>{html.escape(r.model)}</td>"
                   f"<td>{r.requests:,.0f}</td><td>{r.failed:,.0f}</td><td>{r.tokens_per_s:,.1f}</td></tr>"
                   for r in serving_rows(inc.inference, None))
    out = ("<table><tr><th>service</th><th>model</th><th>requests</th><th>failed</th><th>output tokens/s</th></tr>"
           f"{rows}</table>")
    budgets = service_budgets(inc.inference, slos, inc.last_ts + 1.0)
    if not budgets:
        return out + "<p class='muted'>no SLO declared for these services (engine.slo)</p>"
    cells = "".join(f"<tr><td>{html.escape(b.service)}</td><td>{html.escape(b.objective)}</td>"
                    f"<td>{b.target:.2%}</td><td>{b.events.total:,}</td><td>{b.events.bad:,}</td>"
                    f"<td>{b.remaining:.1%}</td><td>{html.escape(b.coverage())}</td></tr>" for b in budgets)
    return out + ("<table><tr><th>service</th><th>objective</th><th>target</th><th>events</th><th>bad</th>"
                  f"<th>budget left</th><th>over</th></tr>{cells}</table>")


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{html.escape(title)}</h2>\n{body}\n</section>\n'


def _img(b64: str, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{b64}">'


def render_report(records: Iterable[Any], transitions: list[AlertTransition], helpers: ReportHelpers, *,
                  baselines: dict[str, dict[str, Baseline | None]] | None = None,
                  title: str = "gpuwarden incident retro", source: str = "",
                  slos: Mapping[str, ServiceSlo] | None = None) -> str:
    """The whole report as one HTML string (``slos``: the services' objectives, for their budgets)."""
    inc = collect(records, transitions)
    keys = focus(inc)
    tiers = Counter(t.tier.value for t in transitions
                    if t.state == AlertState.FIRING and not is_update(t))
    nodes = sorted({k[0] for k in inc.series} | {e.node for e in inc.events})
    overview = (
        "<dl>"
        f"<dt>time range</dt><dd>{_when(inc.first_ts)} → {_when(inc.last_ts)}</dd>"
        f"<dt>source</dt><dd>{html.escape(source or '—')}</dd>"
        f"<dt>nodes</dt><dd>{html.escape(', '.join(nodes) or '—')}</dd>"
        f"<dt>GPUs</dt><dd>{len(inc.series)} ({len(keys)} plotted: "
        f"{html.escape(', '.join(_label(k, inc.series[k]) for k in keys) or '—')})</dd>"
        f"<dt>events</dt><dd>{len(inc.events)}</dd>"
        f"<dt>alerts fired</dt><dd>{', '.join(f'{n} {t}' for t, n in sorted(tiers.items())) or 'none'}"
        f" ({len(transitions)} transitions)</dd></dl>"
    )
    parts = [
        _section("overview", "Overview", overview),
        _section("memory", "Memory", _img(plot_memory(inc, keys), "GPU memory with each memory alert's trend and checkpoints")),
        _section("utilization", "Utilization against the task class baseline",
                 _img(plot_utilization(inc, keys, baselines or {}), "GPU utilization and baseline band")
                 + _band_list(inc, keys, baselines or {})),
        _section("thermal", "Temperature, power and clocks",
                 _img(plot_thermal(inc, keys), "temperature, power and SM clock")),
        _section("timeline", "Event and alert timeline", _img(plot_timeline(inc), "events and alerts timeline")),
        _section("alerts", "Alerts with their evidence", _alert_rows(transitions, helpers)),
        _section("serving", "Inference services and their error budgets", _serving(inc, slos or {})),
    ]
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{html.escape(title)}</h1>\n{''.join(parts)}</body></html>\n")
