"""The inference stage, keyed by node: the serving engines' records → per-service windows → rules.

Keyed by **node**, like ``inference.metrics`` itself (the agent publishes a node's records
under its node key), so the stage runs beside stage 1 on the same partitions with no
repartition: the state of a key is every service served on that node, and the rules judge a
service **per node** (its replicas there: a tail rising, the KV knee, a restart). The SLOs are
the fleet's: as each of a service's minutes closes the stage emits its objectives' events
(a :class:`gpuwarden.contract.ServiceSli`, key service; :meth:`take_slis`) for the service
stage (``servicestage.py``), which sums every node's and judges the burn rates.

Event time only: a record belongs to the minute holding its ``ts``, and a service's rules
run when one of its minutes closes (the node's next released record is in a later minute),
at that minute's end, so replay gives the transitions live did. Records wait in a reorder
buffer until the node's newest ts is ``allowed_lateness`` past them and are applied in
``(ts, boot_id, seq)`` order; one older than the last released is dropped (``late``), a
repeated ``(boot_id, seq)`` too (``duplicates``). A scrape that failed sent nothing, so a
server that went away or answered garbage leaves a gap, never a false rate; a restart
(``reset`` on any series, or a new pid) starts the TTFT comparison against the hour before.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from gpuwarden.contract import AlertTransition, InferenceMetrics, ServiceSli, SliCount, decode, encode
from gpuwarden.slo import judge, record_events
from gpuwarden.streams import statecodec
from gpuwarden.streams.alerts import AlertSlot, fingerprint
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.quantiles import Quantile, quantile
from gpuwarden.streams.reorder import ReorderBuffer
from gpuwarden.streams.servicewindow import MINUTE_S, ServiceWindow
from gpuwarden.streams.servingrules import MIN_RESTART_OBS, RESTART_BASE_S, Restart, Verdict, batch_full, failures, \
    kv_knee, ObjectiveBurn, objective_burns, preemptions, restart_verdicts, step_verdict, tail_verdicts

RECENT_IDS = 1024  # (boot_id, seq) remembered per node to drop duplicates


@statecodec.state
class ServiceState:
    """One service on one node: its windows, the minute open, what its last record said about
    the process, its newest restart with the TTFT buckets before it, and its alert slots."""

    __slots__ = ("window", "open_minute", "pid", "model", "engine", "gpus", "restart_at", "restart_why",
                 "base_counts", "base_bounds", "slots", "last_ts")

    def __init__(self) -> None:
        self.window = ServiceWindow()
        self.open_minute: float | None = None
        self.pid: int | None = None
        self.model = ""
        self.engine = ""
        self.gpus = ""
        self.restart_at: float | None = None
        self.restart_why = ""
        self.base_counts: list[int] | None = None
        self.base_bounds: list[float] | None = None
        self.slots: dict[str, AlertSlot] = {}
        self.last_ts = 0.0

    def restart(self) -> Restart | None:
        if self.restart_at is None:
            return None
        return Restart(self.restart_at, self.restart_why,
                       tuple(self.base_bounds) if self.base_bounds is not None else None,
                       tuple(self.base_counts) if self.base_counts is not None else None)


@statecodec.state
class NodeServing:
    """One node's services, and what its reorder buffer has released."""

    __slots__ = ("newest", "released", "recent", "services")

    def __init__(self) -> None:
        self.newest = float("-inf")
        self.released = float("-inf")
        self.recent: deque = deque(maxlen=RECENT_IDS)
        self.services: dict[str, ServiceState] = {}


#: What a view states of each latency histogram over its last hour (docs/web.md).
VIEW_METRICS = ("ttft", "itl", "e2e")
VIEW_QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class ServiceView:
    """What the live view, the console and reports show of one service (read-only copy): its
    last closed hour (``span_s`` shorter for a service seen for less) up to ``as_of``, and its
    objectives with their budgets and burn rates."""

    node: str
    service: str
    model: str
    engine: str
    as_of: float
    span_s: float
    quantiles: dict[str, dict[float, Quantile | None]]
    requests_per_s: float
    error_rate: float | None
    tokens_per_s: float
    objectives: tuple[ObjectiveBurn, ...]
    firing: tuple[str, ...]
    """The fingerprints of its open alerts."""

    @property
    def budget_remaining(self) -> dict[str, float]:
        return {o.key: o.remaining for o in self.objectives}

    @property
    def ttft_p99(self) -> str:
        return self._p99("ttft")

    @property
    def itl_p99(self) -> str:
        return self._p99("itl")

    def _p99(self, metric: str) -> str:
        """``≤ 2.5 s``: the bucket bound its last hour's p99 lies under; "—" without observations."""
        q = self.quantiles[metric][0.99]
        return "—" if q is None else q.bound()


class InferenceStage:
    """Keyed by node: ``process(record)`` → transitions; ``dump``/``load``/``drop`` per node."""

    def __init__(self, config: EngineConfig) -> None:
        self.cfg = config
        self.lateness = float(config.allowed_lateness)
        self._nodes: dict[str, NodeServing] = {}
        self._held: dict[str, ReorderBuffer[str]] = {}
        self.late = 0
        self.duplicates = 0
        self._slis: list[ServiceSli] = []

    # ------------------------------------------------------------------ keys

    def nodes(self) -> list[str]:
        return sorted(self._nodes)

    def dump(self, node: str) -> bytes:
        held = [[ts, order[0], order[1], line] for ts, order, line in self._held.get(node, ())]
        return statecodec.dumps({"state": self._nodes.get(node) or NodeServing(), "held": held})

    def load(self, node: str, data: bytes) -> None:
        doc = statecodec.loads(data)
        self._nodes[node] = doc["state"]
        self._held[node] = ReorderBuffer((ts, (boot, seq), line) for ts, boot, seq, line in doc["held"])

    def drop(self, node: str) -> None:
        self._nodes.pop(node, None)
        self._held.pop(node, None)

    def position(self, node: str) -> float | None:
        """How far the node's SLO events are made: every ``ServiceSli`` of it with ``ts`` at or
        before this was emitted (the start of the minute its newest released record is in; None
        before any). The watermark the service stage is gated by."""
        ns = self._nodes.get(node)
        if ns is None or ns.released == float("-inf"):
            return None
        return ns.released - ns.released % MINUTE_S

    def counters(self) -> dict[str, int]:
        return {"inference_late": self.late, "inference_duplicates": self.duplicates}

    def open_slots(self) -> list[tuple[str, AlertSlot]]:
        return [(fp, s) for n in self.nodes() for st in self._nodes[n].services.values()
                for fp, s in sorted(st.slots.items()) if s.firing_since is not None]

    # ------------------------------------------------------------------ records

    def take_slis(self) -> list[ServiceSli]:
        """The services' closed minutes' SLO events since the last call, in the order made."""
        out, self._slis = self._slis, []
        return out

    def process(self, record: InferenceMetrics) -> list[AlertTransition]:
        ns = self._nodes.get(record.node)
        if ns is None:
            ns = self._nodes[record.node] = NodeServing()
            self._held[record.node] = ReorderBuffer()
        held = self._held[record.node]
        order = (record.boot_id, record.seq)
        if record.ts < ns.released:
            self.late += 1
            return []
        if order in ns.recent or any(o == order for _, o, _ in held):
            self.duplicates += 1
            return []
        held.add(record.ts, order, encode(record).decode())
        ns.newest = max(ns.newest, record.ts)
        return self._release(record.node, ns, held.release(ns.newest - self.lateness))

    def flush(self) -> list[AlertTransition]:
        """End of a finite input: apply what is held, then close every service's open minute."""
        out: list[AlertTransition] = []
        for node in self.nodes():
            ns = self._nodes[node]
            out += self._release(node, ns, self._held[node].drain())
            for name in sorted(ns.services):
                st = ns.services[name]
                if st.open_minute is not None:
                    self._sli(node, name, st)
                    out += self._evaluate(node, name, st, st.open_minute + MINUTE_S)
        return out

    def _release(self, node: str, ns: NodeServing, items) -> list[AlertTransition]:
        out: list[AlertTransition] = []
        for ts, order, line in items:
            ns.released = max(ns.released, ts)
            ns.recent.append(order)
            rec = decode(line.encode(), InferenceMetrics)
            minute = ts - ts % MINUTE_S
            for name in sorted(ns.services):  # every service of the node moves on in event time
                out += self._close(node, name, ns.services[name], minute)
            st = ns.services.get(rec.service)
            if st is None:
                st = ns.services[rec.service] = ServiceState()
            if st.open_minute is None:
                st.open_minute = minute
            self._apply(st, rec)
        return out

    def _close(self, node: str, name: str, st: ServiceState, minute: float) -> list[AlertTransition]:
        """A record of ``minute`` came: the service's open minute (and a gap up to ``minute``)
        closes, its rules run at the end of the open minute and, after a gap, at ``minute``."""
        if st.open_minute is None or minute <= st.open_minute:
            return []
        self._sli(node, name, st)
        out = self._evaluate(node, name, st, st.open_minute + MINUTE_S)
        if minute > st.open_minute + MINUTE_S:
            out += self._evaluate(node, name, st, minute)
        st.open_minute = minute
        return out

    def _apply(self, st: ServiceState, rec: InferenceMetrics) -> None:
        win, ts = st.window, rec.ts
        if win.first_ts is None:
            win.first_ts = rec.start_ts
        reset = any(h.reset for h in rec.histograms) or any(c.reset for c in rec.counters)
        new_pid = st.pid is not None and rec.pid is not None and rec.pid != st.pid
        if st.last_ts and (reset or new_pid):
            self._restarted(st, ts, "pid %s → %s" % (st.pid, rec.pid) if new_pid else "its counters started again")
        st.pid = rec.pid if rec.pid is not None else st.pid
        st.model, st.engine, st.last_ts = rec.model, rec.engine, ts
        st.gpus = ",".join(map(str, rec.gpu_indices))
        slo = self.cfg.slo.get(rec.service)
        for h in rec.histograms:
            win.add_histogram(ts, h.name, tuple(h.bounds), h.counts, h.sum)
        for c in rec.counters:
            win.add_counter(ts, c.name, c.delta)
        for key, ev in (record_events(rec, slo) if slo else {}).items():
            win.add_events(ts, key, ev)
        sums: dict[str, float] = {}
        for g in rec.gauges:  # series of one name (several labels) add up within a record
            sums[g.name] = sums.get(g.name, 0.0) + g.value
        for name, value in sorted(sums.items()):
            win.add_gauge(ts, name, value)

    def _restarted(self, st: ServiceState, ts: float, why: str) -> None:
        at = ts - ts % MINUTE_S
        base, _ = st.window.buckets("ttft", at - RESTART_BASE_S, at)
        st.restart_at, st.restart_why = at, why
        ok = base is not None and base.total >= MIN_RESTART_OBS
        st.base_bounds = list(base.bounds) if ok and base else None
        st.base_counts = list(base.counts) if ok and base else None

    # ------------------------------------------------------------------ rules

    def _sli(self, node: str, name: str, st: ServiceState) -> None:
        """The open minute's SLO events, for the service stage (every minute of a service with
        an SLO, none too: a node that served it says it is still there)."""
        slo = self.cfg.slo.get(name)
        if slo is None or st.open_minute is None:
            return
        m = st.window.minutes.get(st.open_minute)
        events = m.events if m is not None else {}
        notes = {o.key: judge(st.window.bounds.get(o.metric, ()), o.threshold_s).note() for o in slo.objectives()}
        counts = [SliCount(objective=key, good=g, total=t, undecided=u, note=notes.get(key, ""))
                  for key, (g, t, u) in sorted(events.items())]
        self._slis.append(ServiceSli(ts=st.open_minute + MINUTE_S, service=name, node=node, model=st.model,
                                     engine=st.engine, counts=counts))

    def _evaluate(self, node: str, name: str, st: ServiceState, now: float) -> list[AlertTransition]:
        win = st.window
        slo = self.cfg.slo.get(name)
        serving = self.cfg.serving.get(name)
        verdicts: list[Verdict] = tail_verdicts(win, now)
        verdicts += [kv_knee(win, now), preemptions(win, now), failures(win, now),
                     batch_full(win, now, serving.max_batch if serving else None)]
        verdicts += restart_verdicts(win, now, st.restart())
        labels = {"node": node, "service": name, "model": st.model, "engine": st.engine,
                  **({"gpus": st.gpus} if st.gpus else {})}
        out = [t for v in verdicts
               if (t := step_verdict(st.slots, fingerprint(v.rule, {"node": node, "service": name, **v.identity}),
                                     v, now, labels)) is not None]
        win.trim(now, float(slo.window) if slo else 0.0)
        return out

    # ------------------------------------------------------------------ views

    def views(self) -> list[ServiceView]:
        """Each service's last closed hour and its objectives, as the live view and the console show them."""
        out = []
        for node in self.nodes():
            for name, st in sorted(self._nodes[node].services.items()):
                if st.open_minute is None:
                    continue
                now, win = st.open_minute, st.window
                since = now - 3600.0
                stated = {}
                for metric in VIEW_METRICS:
                    b, _ = win.buckets(metric, since, now)
                    stated[metric] = {q: (quantile(b, q) if b else None) for q in VIEW_QUANTILES}
                span = min(3600.0, now - (win.first_ts or now)) or 1.0
                ok, failed = win.counter("requests", since, now), win.counter("requests_failed", since, now)
                slo = self.cfg.slo.get(name)
                out.append(ServiceView(node, name, st.model, st.engine, now, span, stated, (ok + failed) / span,
                                       failed / (ok + failed) if ok + failed else None,
                                       win.counter("generation_tokens", since, now) / span,
                                       tuple(objective_burns(win, slo, now)) if slo is not None else (),
                                       tuple(fp for fp, s in sorted(st.slots.items()) if s.firing_since is not None)))
        return out
