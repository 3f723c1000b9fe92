"""The web console's reads of a spool (``web.source: spool``): each page reads what it shows.

* One connection for the console's life (opening a spool sums the size of all it holds),
  opened again when the file is replaced; the indexes below are rebuilt then, and after an eviction.
* The alert history and the scheduler's job records are indexes the console keeps
  (:class:`~gpuwarden.notifiers.alertlog.AlertLog`, :class:`~gpuwarden.history.queues.JobIndex`):
  built once from their topics, then each look reads only the records appended since the last
  (``read(after_id=...)``); a spool where nothing was appended costs one lookup (``last_id``).
* The engine state ``gpuwarden run`` saves is loaded when its save time changes: the first time
  a page waits for it, later a page shows the state loaded before while the new one loads
  beside it (the page says as of when), since a load takes about as long as the page budget.
* An alert's chart reads the samples topic for its window alone (``read(topic, since, until)``),
  its node's snapshots only, at most :data:`CHART_POINTS` of them decoded; kept until its window moves.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from zoneinfo import ZoneInfo

from gpuwarden.app.settings import Settings
from gpuwarden.app.standalone import LIVE_STATE, SAVED_AT, SIM_STATE, STATE_NS, with_simulated_services
from gpuwarden.app.webstate import CHART_MARGIN_S, Chart, Fleet, assemble, chart, class_rows, service_summaries
from gpuwarden.contract import AlertTransition, ContractError, NodeSnapshot, Topics, decode
from gpuwarden.history.queues import JobIndex, QueueReport
from gpuwarden.history.retro import collect
from gpuwarden.notifiers.alertlog import AlertLog
from gpuwarden.notifiers.control import ControlRecord, ControlState, load_spool, write_spool
from gpuwarden.notifiers.control_cli import open_alerts
from gpuwarden.notifiers import refusals
from gpuwarden.spool import Spool, SpoolRecord
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import Rule, load_rules

#: Snapshots decoded for one chart at most (a chart is a few hundred pixels wide); more are thinned evenly.
CHART_POINTS = 300
#: Of the window that fired an alert, a chart shows at most the last hour (a 6-h XID window is no utilization chart).
CHART_LOOKBACK_MAX_S = 3600.0
#: After it fired, a chart shows at most half an hour (an alert open for days would otherwise read days).
CHART_AFTER_MAX_S = 1800.0
#: Charts kept between pages (by alert and window).
CHARTS_KEPT = 1024
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EngineState:
    """A loaded engine state: which run saved it ("live GPUs", "simulated GPUs" or why none) and until when."""

    engine: Engine
    which: str
    until: float
    key: tuple[str, bytes]


def chart_window(t: AlertTransition, as_of: float) -> tuple[float, float]:
    """The event-time range an alert's chart shows: the window that fired it (its last hour at
    most) and up to half an hour after, with a margin either side."""
    fired = t.started_at
    lookback = min(t.evidence.window_s or 0.0, CHART_LOOKBACK_MAX_S)
    end = min(t.ended_at or as_of, fired + CHART_AFTER_MAX_S)
    return fired - lookback - CHART_MARGIN_S, max(end, fired) + CHART_MARGIN_S


def _held(t: AlertTransition) -> set[str]:
    return {v for v in (t.labels.get("task"), t.labels.get("task_class")) if v}


def _charted(t: AlertTransition) -> bool:
    """Whether a chart can be drawn at all: the alert names a GPU, or a task whose GPUs show it."""
    return bool(t.labels.get("gpu") and t.labels.get("node")) or bool(_held(t))


class _Samples:
    """The samples topic's records of one read, by node, decoded once however many charts use them."""

    def __init__(self, records: list[SpoolRecord]) -> None:
        self.by_node: dict[str, list[SpoolRecord]] = {}
        for r in records:
            if r.key is not None:
                self.by_node.setdefault(r.key, []).append(r)
        self.ts = {n: [r.ts for r in recs] for n, recs in self.by_node.items()}
        self._decoded: dict[int, NodeSnapshot | None] = {}

    def snapshot(self, r: SpoolRecord) -> NodeSnapshot | None:
        if r.id not in self._decoded:
            try:
                self._decoded[r.id] = decode(r.value, NodeSnapshot)
            except ContractError:
                self._decoded[r.id] = None
        return self._decoded[r.id]

    def thinned(self, node: str, window: tuple[float, float]) -> list[NodeSnapshot]:
        """The node's snapshots in ``window``, every 2^k-th of the read's (at most CHART_POINTS; charts
        of overlapping windows pick the same ones)."""
        lo, hi = bisect_left(self.ts[node], window[0]), bisect_left(self.ts[node], window[1])
        step = 1
        while (hi - lo) // step > CHART_POINTS:
            step *= 2
        recs = self.by_node[node]
        return [s for i in range(-(-lo // step) * step, hi, step) if (s := self.snapshot(recs[i])) is not None]

    def holding(self, held: set[str], at: float) -> list[str]:
        """The nodes whose snapshot nearest ``at`` shows a process of the task (one decoded per node)."""
        hits = []
        for node, ts in sorted(self.ts.items()):
            snap = self.snapshot(self.by_node[node][min(bisect_left(ts, at), len(ts) - 1)])
            if snap is not None and held & set(snap.processes.task):
                hits.append(node)
        return hits


def _add_job(index: JobIndex, r: SpoolRecord) -> None:
    try:
        index.add_stored(decode(r.value))
    except ContractError:
        return


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class SpoolReader:
    """The spool as the console reads it; thread-safe (pages read it from worker threads)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = Topics(settings.kafka.topic_prefix)
        self._lock = threading.RLock()  # the connection and the indexes
        self._spool: Spool | None = None
        self._file: tuple[int, int] | None = None
        self._dropped = -1
        self._cursor = 0
        self._generation = 0  # counts the rebuilds: an index built meanwhile from the spool before is dropped
        self._indexes: dict[str, Any] = {}  # by topic, those built: an AlertLog, a JobIndex
        self._building = {t: threading.Lock() for t in (self.topics.alerts, self.topics.jobs)}
        self._charts: OrderedDict[tuple[str, float, float, float], Chart | None] = OrderedDict()
        self._rules: list[Rule] | None = None
        self._engine: EngineState | None = None
        self._loading = threading.Lock()  # one engine load at a time
        self._reloading: threading.Thread | None = None
        self._kinds: dict[str, tuple[Callable[[], Any], Callable[[Any, SpoolRecord], None]]] = {
            self.topics.alerts: (AlertLog, lambda log, r: log.add(r.value)), self.topics.jobs: (JobIndex, _add_job)}

    def close(self) -> None:
        with self._lock:
            if self._spool is not None:
                self._spool.close()
                self._spool = None

    # ------------------------------------------------------------------ the spool and its indexes

    def _current(self) -> Spool:
        """The open spool, its indexes up to its newest record (the caller holds the lock)."""
        path = Path(self.settings.spool.path)
        if self._spool is None or _file_id(path) != self._file:  # the one before closes with its last reader
            self._spool = Spool(path, self.settings.spool.max_bytes, self.settings.spool.max_age)
            self._file, self._dropped = _file_id(path), -1
        spool = self._spool
        dropped = spool.counter("dropped")
        if dropped != self._dropped:
            self._reindex(spool)
            self._dropped = dropped
        last = spool.last_id()
        if last != self._cursor:
            for r in spool.read(after_id=self._cursor):
                if (index := self._indexes.get(r.topic)) is not None:
                    self._kinds[r.topic][1](index, r)
                last = max(last, r.id)
            self._cursor = last
        return spool

    def _reindex(self, spool: Spool) -> None:
        """Indexes to build again (the next look reads from the newest record on)."""
        self._cursor = spool.last_id()
        self._generation += 1
        self._indexes.clear()
        self._charts.clear()

    def _build(self, topic: str) -> None:
        """``topic``'s index from its records, if not built yet: the long read outside the lock,
        so that other pages go on meanwhile; then, under it, the records the follow passed over."""
        with self._building[topic]:
            with self._lock:
                spool = self._current()
                if topic in self._indexes:
                    return
                upto, generation = self._cursor, self._generation
            make, add = self._kinds[topic]
            index = make()
            for r in spool.read(topic):
                if r.id <= upto:
                    add(index, r)
            with self._lock:
                if generation != self._generation:
                    return  # evicted or replaced meanwhile: the next look builds it again
                for r in spool.read(topic, after_id=upto):
                    if r.id <= self._cursor:
                        add(index, r)
                self._indexes[topic] = index

    def _with_index(self, topic: str, use: Callable[[Spool, Any], T]) -> T:
        """``use(spool, index)`` under the lock, ``topic``'s index current (built first if need be)."""
        while True:
            self._build(topic)
            with self._lock:
                spool = self._current()
                if (index := self._indexes.get(topic)) is not None:
                    return use(spool, index)

    def spool(self) -> Spool:
        with self._lock:
            return self._current()

    # ------------------------------------------------------------------ what pages show

    def firing(self) -> dict[str, AlertTransition]:
        """The open alerts: the alert history's, else the state a ``gpuwarden notify`` here saves."""
        return self._with_index(self.topics.alerts, lambda spool, log: open_alerts(self.settings, spool, log) or {})

    def head(self) -> tuple[str, float]:
        """Which run's engine state the spool holds and until when, without loading it."""
        return self._head(self.spool())[1:]

    def saved_at(self) -> float:
        """When (wall time) ``gpuwarden run`` last saved the engine state the console shows; 0 if never said."""
        key = self._head(self.spool())[0][0]
        at = self.spool().kv_get(STATE_NS, key + SAVED_AT) if key else None
        return float(at) if at is not None else 0.0

    def _head(self, spool: Spool) -> tuple[tuple[str, bytes], str, float]:
        for key, which in ((LIVE_STATE, "live GPUs"), (SIM_STATE, "simulated GPUs")):
            until = spool.kv_get(STATE_NS, key + ":until")
            if until is not None:
                return (key, until), which, float(until)
        return ("", b""), "no run recorded in this spool yet", 0.0

    def engine(self) -> EngineState:
        """The engine state ``gpuwarden run`` saved (live sampling before a simulation's), restored
        into an engine configured as that run's was; the one loaded before while a newer loads."""
        key = self._head(self.spool())[0]
        shown = self._engine
        if shown is not None and shown.key == key:
            return shown
        if shown is not None:
            with self._lock:
                if self._reloading is None or not self._reloading.is_alive():
                    self._reloading = threading.Thread(target=self._load, name="console engine load", daemon=True)
                    self._reloading.start()
            return shown
        return self._load()

    def _load(self) -> EngineState:
        with self._loading:
            spool = self.spool()
            key, which, until = self._head(spool)
            if self._engine is not None and self._engine.key == key:
                return self._engine
            if self._rules is None:
                self._rules = load_rules(self.settings.engine.rules)
            config = with_simulated_services(self.settings.engine) if key[0] == SIM_STATE else self.settings.engine
            engine = Engine(self._rules, config, self.settings.limits.max_past_skew)
            data = spool.kv_get(STATE_NS, key[0]) if key[0] else None
            if data is not None:
                try:
                    engine.load_all(data)
                except ValueError as e:  # written by another version: the alerts still show
                    engine = Engine(self._rules, self.settings.engine, self.settings.limits.max_past_skew)
                    which = f"{which}: saved engine state not readable ({e})"
            self._engine = EngineState(engine, which, until, key)
            return self._engine

    def warm(self) -> None:
        """Build the indexes and load the engine state before the first pages ask (at start)."""
        self.firing()
        self._load()
        self._build(self.topics.jobs)

    def control(self) -> tuple[ControlState, list[str]]:
        """Silences and acks where ``notify.control: spool`` keeps them, and a line per bad record."""
        with self._lock:
            return load_spool(self._current())

    def write(self, record: ControlRecord) -> None:
        with self._lock:
            write_spool(self._current(), record)

    def refusing(self) -> list[refusals.Refusal]:
        with self._lock:
            return refusals.read_all(self._current())

    def scheduler(self, *, by: str, since: float, until: float) -> QueueReport:
        return self._with_index(self.topics.jobs, lambda _, jobs: jobs.report(by=by, since=since, until=until))

    def charts(self, alerts: list[AlertTransition], as_of: float) -> dict[str, Chart | None]:
        """Each alert's chart: its window of the samples topic read once for the alerts whose
        windows overlap, its node's snapshots alone decoded, thinned to CHART_POINTS."""
        out: dict[str, Chart | None] = {}
        todo: list[tuple[AlertTransition, tuple[float, float], tuple[str, float, float, float]]] = []
        with self._lock:
            for t in alerts:
                if not _charted(t):
                    out[t.fingerprint] = None
                    continue
                window = chart_window(t, as_of)
                key = (t.fingerprint, t.started_at, *window)
                if key in self._charts:
                    self._charts.move_to_end(key)
                    out[t.fingerprint] = self._charts[key]
                else:
                    todo.append((t, window, key))
            spool = self._current()
        drawn: dict[tuple[str, float, float, float], Chart | None] = {}
        todo.sort(key=lambda x: x[1])
        while todo:  # outside the lock: other pages go on meanwhile
            lo, hi = todo[0][1]
            n = 1
            while n < len(todo) and todo[n][1][0] <= hi:
                hi = max(hi, todo[n][1][1])
                n += 1
            group, todo = todo[:n], todo[n:]
            samples = _Samples(list(spool.read(self.topics.samples, since=lo, until=hi)))
            for t, window, key in group:
                drawn[key] = out[t.fingerprint] = _chart_of(t, window, samples)
        with self._lock:
            self._charts.update(drawn)
            while len(self._charts) > CHARTS_KEPT:
                self._charts.popitem(last=False)
        return out


def _chart_of(t: AlertTransition, window: tuple[float, float], samples: _Samples) -> Chart | None:
    """The chart from the samples of ``window``: the node it names (or, naming none, those where
    its task ran when it fired), each node's snapshots thinned."""
    node = t.labels.get("node")
    nodes = ([node] if node in samples.by_node else []) if node else samples.holding(_held(t), t.started_at)
    snaps = [s for n in nodes for s in samples.thinned(n, window)]
    return chart(t, collect(snaps, []).series, window) if snaps else None


def read_fleet(reader: SpoolReader, control: ControlState, wall_now: float, *, engine: bool = True) -> Fleet:
    """The console's state from the spool, as much as a page shows: the engine's tables (nodes,
    classes, services) only with ``engine``; no chart (:meth:`SpoolReader.charts` draws those of
    the alerts a page shows). Silences are those active at ``wall_now`` (people set them in wall time)."""
    firing = reader.firing()
    state = reader.engine() if engine else None
    which, until = (state.which, state.until) if state is not None else reader.head()
    zone = ZoneInfo(reader.settings.notify.timezone)
    head = Fleet(which, max([until, *(t.ts for t in firing.values())]), [],
                 class_rows(state.engine) if state is not None else [], [], [],
                 services=service_summaries(state.engine) if state is not None else [],
                 refusing=[f.summary(zone) for f in reader.refusing()], saved_at=reader.saved_at())
    return assemble(reader.settings, state.engine if state is not None else None, firing, control, wall_now, head)
