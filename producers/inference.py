"""Scrape the serving engines on this node (vLLM, SGLang, TGI, Triton) into ``inference_metrics/1`` records.

A server exposes cumulative totals since its start; the agent publishes what happened
between two scrapes (bucket, counter deltas) plus the gauges, one record per model.
Cumulative totals would make every reader track each server's restarts; deltas sum over
any window. A restart is recognised by a series' ``_created`` timestamp changing or any
total going down: that interval's delta is then the new totals (counted since the
restart, as Prometheus' ``rate`` reads a reset) and marked ``reset``. The first scrape of
a target only takes the baseline (its lifetime totals are not one interval's events), and a
scrape that fails (server away, an HTTP error, text that does not parse, none of the
engine's metrics) publishes nothing, keeps the baseline, logs once per change and is
counted in :attr:`InferenceScraper.counts`. Parsing is ``prometheus_client``'s.

Wall clock paces the scrapes and times out the request; ``ts``/``start_ts`` are the
agent's clock at the two scrapes, like every record it stamps.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from gpuwarden.contract import CounterDelta, GaugeValue, GpuProcess, HistogramDelta, InferenceMetrics
from gpuwarden.producers.config import InferenceConfig, InferenceTarget
from gpuwarden.producers.listeners import ancestors, family, parents, port_owners
from gpuwarden.producers.servingnames import ENGINES, EngineNames

log = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class SeriesKey:
    """One series of one target: its family and its labels (the histogram's ``le`` aside)."""

    family: str
    labels: Labels


@dataclass
class Totals:
    """A series' cumulative values at one scrape: per-bucket cumulative counts (histograms;
    one value for a counter), the observation sum, and ``_created`` when the server gives it."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float
    created: float | None = None

    def reset_since(self, prev: "Totals") -> bool:
        """Whether the server restarted (or reconfigured the series) since ``prev``."""
        if self.created is not None and prev.created is not None and self.created != prev.created:
            return True
        if self.bounds != prev.bounds or self.total < prev.total:
            return True
        return any(now < before for now, before in zip(self.cumulative, prev.cumulative))

    def minus(self, prev: "Totals | None") -> "Totals":
        """What happened since ``prev`` (all of it after a reset, or with no ``prev``)."""
        if prev is None or self.reset_since(prev):
            return self
        return Totals(self.bounds, tuple(a - b for a, b in zip(self.cumulative, prev.cumulative)),
                      self.total - prev.total, self.created)


@dataclass
class Scrape:
    """One parsed scrape: per series its totals (histograms, counters) or value (gauges)."""

    histograms: dict[SeriesKey, Totals] = field(default_factory=dict)
    counters: dict[SeriesKey, Totals] = field(default_factory=dict)
    gauges: dict[SeriesKey, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.histograms) + len(self.counters) + len(self.gauges)


def _labels(sample_labels: dict[str, str], drop: str = "") -> Labels:
    return tuple(sorted((k, v) for k, v in sample_labels.items() if k != drop))


def parse(text: str, names: EngineNames) -> Scrape:
    """The engine's families in ``text`` (Prometheus text format or OpenMetrics); ValueError on
    text that does not parse. Families the engine table does not name are skipped. A series'
    ``_created`` comes as a sample of its family (OpenMetrics) or, in the classic text format
    ``generate_latest`` writes, as a gauge family of its own (``<family>_created``)."""
    out = Scrape()
    families = list(text_string_to_metric_families(text))
    created: dict[SeriesKey, float] = {}
    wanted_hist = {*names.histograms, *names.histogram_sums}
    for fam in families:
        base = fam.name.removesuffix("_created")
        if base in wanted_hist or base in names.counters:
            for s in fam.samples:
                if s.name.endswith("_created"):
                    created[SeriesKey(base, _labels(s.labels))] = s.value
    written = {fam.name for fam in families}
    for fam in families:
        if names.superseded.get(fam.name) in written:
            continue  # the newer family carries the same observations
        if fam.name in wanted_hist and fam.type == "histogram":
            _histogram(fam, out.histograms, created, names.histogram_units.get(fam.name, 1.0))
        elif fam.name in names.counters and fam.type == "counter":
            for s in fam.samples:  # ``_total`` as prometheus_client writes it; bare as TGI and Triton do
                if s.name in (fam.name, fam.name + "_total"):
                    key = SeriesKey(fam.name, _labels(s.labels))
                    out.counters[key] = Totals((), (s.value,), s.value, created.get(key))
        elif fam.name in names.gauges and fam.type == "gauge":
            for s in fam.samples:
                out.gauges[SeriesKey(fam.name, _labels(s.labels))] = s.value
    return out


def _histogram(fam, into: dict[SeriesKey, Totals], created: dict[SeriesKey, float], unit_s: float = 1.0) -> None:
    """One histogram family's series; ``unit_s`` converts its bounds and sums to seconds."""
    buckets: dict[Labels, list[tuple[float, float]]] = {}
    sums: dict[Labels, float] = {}
    for s in fam.samples:
        suffix = s.name[len(fam.name):]
        if suffix == "_bucket":
            buckets.setdefault(_labels(s.labels, "le"), []).append((float(s.labels["le"]), s.value))
        elif suffix == "_sum":
            sums[_labels(s.labels)] = s.value
    for labels, rows in buckets.items():
        rows.sort()
        if rows[-1][0] != float("inf"):
            raise ValueError(f"{fam.name}{dict(labels)}: no +Inf bucket")
        key = SeriesKey(fam.name, labels)
        into[key] = Totals(tuple(le * unit_s for le, _ in rows[:-1]), tuple(v for _, v in rows),
                           sums.get(labels, 0.0) * unit_s, created.get(key))


class TargetState:
    """What the agent remembers of one target between scrapes: the last totals and when."""

    def __init__(self, target: InferenceTarget) -> None:
        self.target = target
        self.names = ENGINES[target.engine]
        self.last: Scrape | None = None
        self.last_ts: float | None = None
        self.failing: str | None = None
        #: The serving process and the GPUs it and its children hold, from /proc and NVML.
        self.pid: int | None = None
        self.gpus: list[int] = list(target.gpus)

    @property
    def port(self) -> int | None:
        """The target's port when it is on this host's loopback (else /proc cannot name its process)."""
        parts = urlsplit(self.target.url)
        if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
            return None
        return parts.port or (443 if parts.scheme == "https" else 80)

    def advance(self, scrape: Scrape, ts: float) -> tuple[float | None, int, dict[str, "_ModelParts"]]:
        """``(start, resets, parts per model)``: what happened since the previous scrape, and in
        how many series the server had restarted; ``(None, 0, {})`` on the first scrape."""
        prev, start = self.last, self.last_ts
        self.last, self.last_ts = scrape, ts
        if prev is None or start is None:
            return None, 0, {}
        models: dict[str, _ModelParts] = {}
        names = self.names
        hist = list(_changes(scrape.histograms, prev.histograms, start, names.model_label))
        for c in hist:
            if c.key.family in names.histogram_sums:  # a per-request count: its sum is the counter
                models.setdefault(c.model, _ModelParts()).counters.append(CounterDelta(
                    name=names.histogram_sums[c.key.family], metric=c.key.family, labels=c.labels,
                    delta=max(c.delta.total, 0.0), reset=c.reset))
                continue
            counts = [round(x - y) for x, y in zip(c.delta.cumulative, (0.0, *c.delta.cumulative[:-1]))]
            models.setdefault(c.model, _ModelParts()).histograms.append(HistogramDelta(
                name=names.histograms[c.key.family], metric=c.key.family, labels=c.labels,
                bounds=list(c.delta.bounds), counts=counts, count=sum(counts), sum=max(c.delta.total, 0.0),
                reset=c.reset))
        ctrs = list(_changes(scrape.counters, prev.counters, start, names.model_label))
        for c in ctrs:
            name = names.counters[c.key.family]
            if name == "requests" and any(c.labels.get(k) in v for k, v in names.error_outcomes.items()):
                name = "requests_failed"
            models.setdefault(c.model, _ModelParts()).counters.append(CounterDelta(
                name=name, metric=c.key.family, labels=c.labels, delta=max(c.delta.total, 0.0), reset=c.reset))
        for key, value in scrape.gauges.items():
            model, labels = _split(key.labels, names.model_label)
            models.setdefault(model, _ModelParts()).gauges.append(GaugeValue(
                name=names.gauges[key.family], metric=key.family, labels=labels, value=value))
        return start, sum(c.reset for c in (*hist, *ctrs)), models


@dataclass(frozen=True)
class _Change:
    """One series' delta since the previous scrape, with the model it belongs to."""

    key: SeriesKey
    model: str
    labels: dict[str, str]
    delta: Totals
    reset: bool


def _changes(now: dict[SeriesKey, Totals], before: dict[SeriesKey, Totals], start: float,
             model_label: str) -> Iterator[_Change]:
    """Each series' delta since the scrape at ``start``. A series new since then counts whole:
    it was not there at ``start`` (TGI's exporter and Triton add a labelled series, such as a
    failure reason, on its first event), unless its ``_created`` says it began before."""
    for key, totals in now.items():
        prev = before.get(key)
        if prev is None and totals.created is not None and totals.created < start:
            continue
        reset = prev is not None and totals.reset_since(prev)  # a new series is not a restart
        model, labels = _split(key.labels, model_label)
        yield _Change(key, model, labels, totals.minus(prev), reset)


@dataclass
class _ModelParts:
    histograms: list[HistogramDelta] = field(default_factory=list)
    counters: list[CounterDelta] = field(default_factory=list)
    gauges: list[GaugeValue] = field(default_factory=list)


def _engine_of(text: str) -> str | None:
    """The engine whose metrics ``text`` carries: the first family one of them names."""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line[7:].split(" ", 1)[0].removesuffix("_total")
            for engine, names in ENGINES.items():
                if name in names.families():
                    return engine
    return None


def _split(labels: Labels, model_label: str) -> tuple[str, dict[str, str]]:
    """The model a series belongs to, and its other labels."""
    rest = dict(labels)
    return rest.pop(model_label, "") or "unknown", rest


class InferenceScraper:
    """Scrapes every configured target on ``interval`` (wall clock) in its own thread;
    :meth:`drain` hands the records to the agent's tick. :meth:`scrape_all` is one round,
    callable without the thread (tests, the benchmark)."""

    def __init__(self, config: InferenceConfig, *, node: str, boot_id: str,
                 clock: Callable[[], float] = time.time, client: httpx.Client | None = None,
                 proc_root: Path | None = None, gpu_processes: Callable[[], list[GpuProcess]] | None = None) -> None:
        self.config = config
        self.node, self.boot_id, self.clock = node, boot_id, clock
        self.states = [TargetState(t) for t in config.targets]
        self.proc_root, self.gpu_processes = proc_root, gpu_processes
        self._probed: set[tuple[int, int]] = set()
        self._refreshed: float | None = None
        self.client = client or httpx.Client(timeout=config.timeout)
        self.seq = 0
        #: (url, what) -> count: unreachable, http_status, unparsable, no_metrics (no record), reset.
        self.counts: Counter[tuple[str, str]] = Counter()
        self._out: list[InferenceMetrics] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def scrape_all(self) -> list[InferenceMetrics]:
        now = time.monotonic()
        if self._refreshed is None or now - self._refreshed >= self.config.refresh:
            self._refreshed = now
            self.refresh()
        out: list[InferenceMetrics] = []
        for state in self.states:
            out.extend(self.scrape(state))
        return out

    def scrape(self, state: TargetState) -> list[InferenceMetrics]:
        url = state.target.url
        text = self._fetch(state)
        if text is None:
            return []
        try:
            scrape = parse(text, state.names)
        except (ValueError, KeyError) as e:
            return self._failed(state, "unparsable", f"answered text that does not parse as Prometheus metrics ({e})")
        if not scrape:
            return self._failed(state, "no_metrics", f"answered none of {state.target.engine}'s metrics")
        if state.failing is not None:
            log.info("inference target %s (%s) answers again", url, state.target.service)
            state.failing = None
        start, resets, models = state.advance(scrape, self.clock())
        if resets:
            self.counts[(url, "reset")] += 1
            log.warning("inference target %s (%s): counters reset (server restarted?) in %d series; "
                        "this interval counts from the restart", url, state.target.service, resets)
        if start is None:
            return []
        return [self._record(state, start, model, parts) for model, parts in sorted(models.items())]

    def refresh(self) -> None:
        """(``discover``) add the engines found listening in the ancestry of the processes
        holding GPUs, then name each target's serving process and the GPUs it and its children
        hold. Only those processes' file descriptors are read: a target outside them has no GPU
        to attribute."""
        if self.proc_root is None or self.gpu_processes is None:
            return
        holders = self.gpu_processes()
        parent_of = parents(self.proc_root)
        lineage = {p.pid: ancestors(p.pid, parent_of) for p in holders}
        owners = port_owners(self.proc_root, {a for line in lineage.values() for a in line})
        if self.config.discover:
            self._discover(holders, lineage, owners)
        held: dict[int, set[int]] = {}
        for p in holders:
            held.setdefault(p.pid, set()).add(p.gpu_index)
        for state in self.states:
            state.pid = pid = owners.get(state.port) if state.port is not None else None
            if not state.target.gpus:
                members = family(pid, parent_of) if pid is not None else set()
                state.gpus = sorted({g for m in members for g in held.get(m, ())})

    def _discover(self, holders: list[GpuProcess], lineage: dict[int, list[int]], owners: dict[int, int]) -> None:
        """Probe each port of a GPU holder's ancestry once (per process); an answer with an
        engine's metrics becomes a target named for the holder's task."""
        known = {s.port for s in self.states}
        for port, pid in sorted(owners.items()):
            if port in known or (pid, port) in self._probed:
                continue
            self._probed.add((pid, port))
            holder = next(h for h in holders if pid in lineage[h.pid])
            url = f"http://127.0.0.1:{port}/metrics"
            try:
                resp = self.client.get(url)
            except httpx.HTTPError:
                continue
            engine = _engine_of(resp.text) if resp.status_code == 200 else None
            if engine is None:
                continue
            service = holder.task or f"pid-{pid}"
            self.states.append(TargetState(InferenceTarget(url=url, engine=engine, service=service)))
            known.add(port)
            log.info("inference: found %s serving %s on %s (pid %d)", engine, service, url, pid)

    def _fetch(self, state: TargetState) -> str | None:
        url = state.target.url
        try:
            resp = self.client.get(url)
        except httpx.HTTPError as e:
            self._failed(state, "unreachable", f"did not answer ({type(e).__name__}: {e})")
            return None
        if resp.status_code != 200:
            self._failed(state, "http_status", f"answered HTTP {resp.status_code}")
            return None
        return resp.text

    def _failed(self, state: TargetState, reason: str, what: str) -> list[InferenceMetrics]:
        """Count it; log it when the target's trouble changes (not every interval)."""
        self.counts[(state.target.url, reason)] += 1
        if state.failing != reason:
            log.warning("inference target %s (%s) %s: no record this interval, nothing alerted; "
                        "the last good totals stay the baseline", state.target.url, state.target.service, what)
            state.failing = reason
        return []

    def _record(self, state: TargetState, start: float, model: str, parts: _ModelParts) -> InferenceMetrics:
        t = state.target
        rec = InferenceMetrics(
            ts=state.last_ts, node=self.node, seq=self.seq, boot_id=self.boot_id, start_ts=start,
            engine=t.engine, service=t.service, model=model, url=t.url, pid=state.pid, gpu_indices=state.gpus,
            histograms=parts.histograms, counters=parts.counters, gauges=parts.gauges)
        self.seq += 1
        return rec

    # -- the thread ----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="inference-scrape", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            due = time.monotonic() + self.config.interval
            records = self.scrape_all()
            with self._lock:
                self._out.extend(records)
            self._stop.wait(max(0.0, due - time.monotonic()))

    def drain(self) -> list[InferenceMetrics]:
        with self._lock:
            out, self._out = self._out, []
        return out

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.timeout + 1.0)
        self.client.close()

