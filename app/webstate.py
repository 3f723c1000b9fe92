"""What the web console shows, read from the state the notifier uses: the spool's alert log and
control records, the engine state ``gpuwarden run`` saves there, and its sample history.

Read-only: the console runs beside ``gpuwarden run`` (another process writing the same SQLite
file, which WAL lets us read without blocking it); :mod:`gpuwarden.app.webspool` reads it, each
page only what it shows (:func:`gpuwarden.app.webspool.read_fleet`). In cluster mode
(``web.source: kafka``) the same page state is assembled
from :mod:`gpuwarden.app.webcluster`'s in-memory view of the topics instead (:func:`assemble`
serves both). ``/alerts`` shows :data:`ALERTS_PER_PAGE` alerts a page (:func:`paginate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gpuwarden.app.display import band, clamp, urgency
from gpuwarden.app.settings import Settings
from gpuwarden.contract import Ack, AlertTransition, Baseline, Silence
from gpuwarden.history.retro import GpuSeries
from gpuwarden.notifiers.control import ControlState
from gpuwarden.notifiers.render import evidence_parts, words
from gpuwarden.notifiers.router import alert_groups
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.inferencestage import ServiceView
from gpuwarden.streams.servingrules import ObjectiveBurn
from gpuwarden.streams.metrics import CLASS_ROW
from gpuwarden.streams.view import NodeView, node_view

#: An alert's chart starts this long before the window that fired it.
CHART_MARGIN_S = 600.0
#: Alerts on one page of ``/alerts`` (``?page=N``; ``?alert=FP`` opens the page that holds FP).
ALERTS_PER_PAGE = 20
#: Which of a GPU's recorded series shows a metric an alert names (others: utilization).
_SERIES = {"mem_used_gib": "mem_gib", "mem_used_frac": "mem_gib", "headroom_gib": "mem_gib",
           "time_to_oom_s": "mem_gib", "temp_gpu_c": "temp", "temp_per_w": "temp", "power_w": "power",
           "power_frac": "power", "clock_frac": "clock", "util_gpu": "util"}
_SERIES_UNIT = {"mem_gib": "GiB", "temp": "°C", "power": "W", "clock": "MHz", "util": "%"}
_SERIES_TITLE = {"mem_gib": "memory used", "temp": "temperature", "power": "power", "clock": "SM clock",
                 "util": "utilization"}


@dataclass(frozen=True, slots=True)
class ClassRow:
    task_class: str
    metric: str
    shown: str  # the band as read ("88 (50–100 %)") or "learning"
    baseline: Baseline | None


@dataclass(frozen=True, slots=True)
class Chart:
    """One alert's window: the series it was judged on, from the recorded samples."""

    title: str
    unit: str
    ts: list[float]
    values: list[float | None]
    band: tuple[float, float] | None
    fired_at: float


@dataclass(frozen=True, slots=True)
class AlertCard:
    alert: AlertTransition
    evidence: list[str]
    ack: Ack | None
    chart: Chart | None


@dataclass(frozen=True, slots=True)
class ServiceSummary:
    """One service: its objectives over all its nodes (the service stage's budgets and burn
    rates), its open alerts (SLO ones and its nodes'), and each node's latency and rates."""

    service: str
    objectives: list[ObjectiveBurn]
    firing: tuple[str, ...]
    nodes: list[ServiceView]


def service_summaries(engine: Engine) -> list[ServiceSummary]:
    by: dict[str, list[ServiceView]] = {}
    for v in engine.inference.views():
        by.setdefault(v.service, []).append(v)
    return [ServiceSummary(n, engine.services.objectives(n),
                           engine.services.firing(n) + tuple(fp for v in by.get(n, []) for fp in v.firing),
                           by.get(n, []))
            for n in sorted(set(by) | set(engine.services.services()))]


@dataclass(frozen=True, slots=True)
class Fleet:
    """What a page is drawn from; ``as_of`` is the newest event time the state has seen."""

    source: str
    as_of: float
    nodes: list[NodeView]
    classes: list[ClassRow]
    groups: list[tuple[dict[str, str], list[AlertCard]]]
    silences: list[Silence]
    services: list[ServiceSummary] = field(default_factory=list)
    """The inference services: the service stage's objectives, the inference stage's nodes."""
    banner: str = ""
    """What the reader must know first ('' when all is well): Kafka unreachable, topics missing."""
    refusing: list[str] = field(default_factory=list)
    """Receivers that refuse our messages (notifiers/refusals.py), as their meta alert says it."""
    saved_at: float = 0.0
    """Wall time ``gpuwarden run`` last saved the state (every 30 s, and at its end); 0 when unknown.
    A simulation's event time ends where its wall time began (#33: "38 min ago" right after the demo)."""


def chart(t: AlertTransition, series: dict[tuple[str, int], GpuSeries], window: tuple[float, float]) -> Chart | None:
    """The alert's samples in ``window`` on the GPU it names or the first its task held; a
    utilization band is clamped to 0–100 % for display."""
    node, gpu = t.labels.get("node"), t.labels.get("gpu")
    held = {v for v in (t.labels.get("task"), t.labels.get("task_class")) if v}  # series count either
    key = (node, int(gpu)) if node and gpu and gpu.isdigit() else None
    if key not in series:
        key = next((k for k, s in sorted(series.items()) if held & s.tasks.keys()
                    and (node is None or k[0] == node)), None)
    if key is None:
        return None
    metric = next((m for m in t.evidence.values if m in _SERIES), "util_gpu")
    attr = _SERIES[metric]
    s = series[key]
    start, end = window
    picked = [(ts, v) for ts, v in zip(s.ts, getattr(s, attr)) if start <= ts <= end]
    b = t.evidence.baseline
    shown = (clamp("util_gpu", b.low), clamp("util_gpu", b.high)) if b is not None and attr == "util" else None
    return Chart(f"{key[0]} GPU {key[1]}: {_SERIES_TITLE[attr]}", _SERIES_UNIT[attr], [p[0] for p in picked],
                 [p[1] for p in picked], shown, t.started_at)


def class_rows(engine: Engine) -> list[ClassRow]:
    """Each task class's statistics with their bands (clamped for display) or "learning"."""
    return [ClassRow(c, m, band(m, b), b) for c in engine.classes.classes()
            for m, b in engine.classes.baseline(c).items() if m in CLASS_ROW]


def assemble(settings: Settings, engine: Engine | None, firing: dict[str, AlertTransition], control: ControlState,
             wall_now: float, head: Fleet) -> Fleet:
    """``head`` (source, as_of, classes, banner) completed with the nodes of ``engine`` (none
    without one), the open alerts grouped as the router groups them, in a stable order (by
    urgency, then fingerprint), and the silences active at ``wall_now``."""
    nodes = [] if engine is None else [node_view(st) for n in engine.nodes.nodes()
                                       if (st := engine.nodes.state(n)) is not None]
    w = words(settings.language)
    ordered = sorted(firing.values(), key=lambda t: (*urgency(t), t.fingerprint))
    cards = {t.fingerprint: AlertCard(t, evidence_parts(t.evidence, w, settings.language), control.ack(t), None)
             for t in ordered}
    groups = sorted(([(labels, [cards[t.fingerprint] for t in alerts])
                      for labels, alerts in alert_groups(settings.notify, ordered)]),
                    key=lambda g: min(urgency(c.alert) for c in g[1]))
    return replace(head, nodes=nodes, groups=groups, silences=control.silences(wall_now))


@dataclass(frozen=True, slots=True)
class AlertPage:
    """One page of ``/alerts``: its alerts in their groups (a group split across pages shows on
    each, with how many of its alerts it has in all), and where it is among the pages."""

    groups: list[tuple[dict[str, str], list[AlertCard], int]]
    number: int
    pages: int
    first: int  # the position of its first alert among all, from 1 (0 when there are none)
    total: int

    def cards(self) -> list[AlertCard]:
        return [c for _, cards, _ in self.groups for c in cards]


def paginate(groups: list[tuple[dict[str, str], list[AlertCard]]], number: int = 1, *, fingerprint: str = "",
             size: int = ALERTS_PER_PAGE) -> AlertPage:
    """Page ``number`` (from 1, kept in range) of the alerts in their shown order, or the page that
    holds ``fingerprint`` when it is open."""
    flat = [(i, c) for i, (_, cards) in enumerate(groups) for c in cards]
    pages = max(1, -(-len(flat) // size))
    at = next((k for k, (_, c) in enumerate(flat) if c.alert.fingerprint == fingerprint), None) if fingerprint else None
    number = at // size + 1 if at is not None else min(max(number, 1), pages)
    shown: list[tuple[dict[str, str], list[AlertCard], int]] = []
    last = -1
    for i, c in flat[(number - 1) * size:number * size]:
        if i != last:
            shown.append((groups[i][0], [], len(groups[i][1])))
            last = i
        shown[-1][1].append(c)
    return AlertPage(shown, number, pages, (number - 1) * size + 1 if flat else 0, len(flat))
