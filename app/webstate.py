"""What the web console shows, read from the state the notifier uses: the spool's alert log and
control records, the engine state ``gpuwarden run`` saves there, and its sample history.

Read-only and rebuilt per page: the console runs beside ``gpuwarden run`` (another process
writing the same SQLite file, which WAL lets us read without blocking it). In cluster mode
(``web.source: kafka``) the same page state is assembled from :mod:`gpuwarden.app.webcluster`'s
in-memory view of the topics instead (:func:`assemble` serves both).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from zoneinfo import ZoneInfo

from gpuwarden.app.display import band, clamp, urgency
from gpuwarden.app.settings import Settings
from gpuwarden.app.standalone import LIVE_STATE, SIM_STATE, STATE_NS, with_simulated_services
from gpuwarden.contract import Ack, AlertTransition, Baseline, Silence
from gpuwarden.history.retro import GpuSeries, collect
from gpuwarden.history.sources import read_spool
from gpuwarden.notifiers.control import ControlState
from gpuwarden.notifiers import refusals
from gpuwarden.notifiers.control_cli import open_alerts
from gpuwarden.notifiers.render import evidence_parts, words
from gpuwarden.notifiers.router import alert_groups
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.inferencestage import ServiceView
from gpuwarden.streams.servingrules import ObjectiveBurn
from gpuwarden.streams.metrics import CLASS_ROW
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.view import NodeView, node_view

#: An alert's chart starts this long before the window that fired it.
CHART_MARGIN_S = 600.0
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


def open_spool(settings: Settings) -> Spool:
    return Spool(settings.spool.path, settings.spool.max_bytes, settings.spool.max_age)


def _engine(settings: Settings, spool: Spool) -> tuple[Engine, str, float]:
    """The engine state ``gpuwarden run`` saved (live sampling before a simulation's), restored
    into an engine configured as that run's was (a simulation's services judged by its SLOs);
    (engine, which, until)."""
    rules = load_rules(settings.engine.rules)
    engine = Engine(rules, settings.engine, settings.limits.max_past_skew)
    for key, which in ((LIVE_STATE, "live GPUs"), (SIM_STATE, "simulated GPUs")):
        data = spool.kv_get(STATE_NS, key)
        if data is not None:
            until = float(spool.kv_get(STATE_NS, key + ":until") or b"0")
            if key == SIM_STATE:
                engine = Engine(rules, with_simulated_services(settings.engine), settings.limits.max_past_skew)
            try:
                engine.load_all(data)
            except ValueError as e:  # written by another version: the alerts still show
                return Engine(engine.rules, settings.engine), f"{which}: saved engine state not readable ({e})", until
            return engine, which, until
    return engine, "no run recorded in this spool yet", 0.0


def _chart(t: AlertTransition, series: dict[tuple[str, int], GpuSeries], as_of: float) -> Chart | None:
    """The window that fired the alert (and a margin), on the GPU it names or the first its task held;
    a utilization band is clamped to 0–100 % for display."""
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
    start = t.started_at - (t.evidence.window_s or 0) - CHART_MARGIN_S
    end = (t.ended_at or as_of) + CHART_MARGIN_S
    picked = [(ts, v) for ts, v in zip(s.ts, getattr(s, attr)) if start <= ts <= end]
    b = t.evidence.baseline
    shown = (clamp("util_gpu", b.low), clamp("util_gpu", b.high)) if b is not None and attr == "util" else None
    return Chart(f"{key[0]} GPU {key[1]}: {_SERIES_TITLE[attr]}", _SERIES_UNIT[attr], [p[0] for p in picked],
                 [p[1] for p in picked], shown, t.started_at)


def read_fleet(settings: Settings, control: ControlState, wall_now: float) -> Fleet:
    """The whole console's state from the spool; silences are those active at ``wall_now``
    (people set them in wall time)."""
    with open_spool(settings) as spool:
        engine, which, until = _engine(settings, spool)
        firing = open_alerts(settings, spool) or {}
        as_of = max([until, *(t.ts for t in firing.values())])
        since = min((t.started_at - (t.evidence.window_s or 0) for t in firing.values()), default=as_of)
        records = read_spool(spool, since - CHART_MARGIN_S, as_of + 1, topic_prefix=settings.kafka.topic_prefix)
        series = collect(records, []).series if firing else {}
        refusing = [f.summary(ZoneInfo(settings.notify.timezone)) for f in refusals.read_all(spool)]
    return assemble(settings, engine, firing, control, wall_now,
                    Fleet(which, as_of, [], class_rows(engine), [], [], services=service_summaries(engine),
                          refusing=refusing), series)


def class_rows(engine: Engine) -> list[ClassRow]:
    """Each task class's statistics with their bands (clamped for display) or "learning"."""
    return [ClassRow(c, m, band(m, b), b) for c in engine.classes.classes()
            for m, b in engine.classes.baseline(c).items() if m in CLASS_ROW]


def assemble(settings: Settings, engine: Engine, firing: dict[str, AlertTransition], control: ControlState,
             wall_now: float, head: Fleet, series: dict[tuple[str, int], GpuSeries] | None = None) -> Fleet:
    """``head`` (source, as_of, classes, banner) completed with the nodes of ``engine``, the open
    alerts grouped as the router groups them (charts where ``series`` has the samples) and the
    silences active at ``wall_now``."""
    nodes = [node_view(st) for n in engine.nodes.nodes() if (st := engine.nodes.state(n)) is not None]
    w = words(settings.language)
    ordered = sorted(firing.values(), key=urgency)
    cards = {t.fingerprint: AlertCard(t, evidence_parts(t.evidence, w, settings.language), control.ack(t),
                                      _chart(t, series, head.as_of) if series else None)
             for t in ordered}
    groups = sorted(([(labels, [cards[t.fingerprint] for t in alerts])
                      for labels, alerts in alert_groups(settings.notify, ordered)]),
                    key=lambda g: min(urgency(c.alert) for c in g[1]))
    return replace(head, nodes=nodes, groups=groups, silences=control.silences(wall_now))
