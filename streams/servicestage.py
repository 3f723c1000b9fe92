"""The service stage, keyed by service: every node's SLO events summed, the fleet's burn rates.

A service's replicas run on several nodes, and an SLO judges the service, not a replica: with
4 replicas, one bad replica burning at 14.4x is a 3.6x burn of the service. The inference
stage (key node) emits each closed minute's SLO events per service (``ServiceSli``, key
service, on ``inference.sli`` in the Kafka topology); this stage sums them per minute across
the nodes and runs the SLO burn-rate rules (``servingrules.burn_verdicts``) on the sum at each
minute's end, their evidence saying how many nodes served it and which burns most.

Event time, and replay == live: a service's SLIs wait in a reorder buffer and are applied in
``(ts, node)`` order once every live contributor (a node less than ``summary_lateness``
behind the service's newest) has sent one at least as new, and, in the Kafka topology, once
the *gate* has passed them (``process(sli, gate)``, ``release``): the watermark of the
inference stage's progress over its input partitions (``streams/progress.py``, as stage 2
is gated by stage 1), so a node whose partition is still reading a backlog cannot send a
minute that sorts ahead of what was applied. In one process (``Engine``) the gate is open.
A minute's rules run at its end once every live node and the gate have passed it (or, at the
latest, when a later minute is applied), and after a gap once more at the start of the new one. An SLI not newer than its node's last is dropped
(``duplicates``: the inference stage re-emits after a restart); one older than what was
applied is added to the windows (the budget counts it) and counted ``late``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuwarden.contract import AlertTransition, ServiceSli, decode, encode
from gpuwarden.slo import Events
from gpuwarden.streams import statecodec
from gpuwarden.streams.alerts import AlertSlot, fingerprint
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.reorder import ReorderBuffer
from gpuwarden.streams.servicewindow import MINUTE_S, ServiceWindow
from gpuwarden.streams.servingrules import ObjectiveBurn, burn_verdicts, objective_burns, over_target, step_verdict

FORGET_S = 86400.0  # a node silent this long (event time) is forgotten by the service


@dataclass(frozen=True)
class SloStatus:
    """One objective of one service over all its nodes at its last judged minute: the budget
    left (1 untouched, below 0 overspent) and the burn rate over each window the burn alerts use."""

    service: str
    sli: str
    budget_remaining: float
    burn: dict[float, float]  # window (s) -> burn rate


@statecodec.state
class FleetService:
    """One service across its nodes: the summed windows, each node's own (for the evidence),
    the newest minute each node sent, what was applied, the minute open, and its alert slots."""

    __slots__ = ("window", "nodes", "received", "newest", "released", "open_minute", "judged", "model", "engine",
                 "notes", "slots")

    def __init__(self) -> None:
        self.window = ServiceWindow()
        self.nodes: dict[str, ServiceWindow] = {}
        self.received: dict[str, float] = {}  # node -> the newest ts it sent
        self.newest = -math.inf
        self.released = -math.inf
        self.open_minute: float | None = None  # the end of the minute being summed
        self.judged = -math.inf  # the end of the last minute the rules ran at
        self.model = ""
        self.engine = ""
        self.notes: dict[str, str] = {}  # objective -> how its threshold is judged on the buckets
        self.slots: dict[str, AlertSlot] = {}


class ServiceStage:
    """Keyed by service: ``process(sli, gate)`` → transitions; ``dump``/``load``/``drop`` per service."""

    def __init__(self, config: EngineConfig) -> None:
        self.cfg = config
        self.lateness = float(config.summary_lateness)
        self._services: dict[str, FleetService] = {}
        self._held: dict[str, ReorderBuffer[str]] = {}
        self.late = 0
        self.duplicates = 0

    # ------------------------------------------------------------------ keys

    def services(self) -> list[str]:
        return sorted(self._services)

    def dump(self, service: str) -> bytes:
        held = [[ts, order[0], line] for ts, order, line in self._held.get(service, ())]
        return statecodec.dumps({"state": self._services.get(service) or FleetService(), "held": held})

    def load(self, service: str, data: bytes) -> None:
        doc = statecodec.loads(data)
        self._services[service] = doc["state"]
        self._held[service] = ReorderBuffer((ts, (node,), line) for ts, node, line in doc["held"])

    def drop(self, service: str) -> None:
        self._services.pop(service, None)
        self._held.pop(service, None)

    def counters(self) -> dict[str, int]:
        return {"sli_late": self.late, "sli_duplicates": self.duplicates}

    def open_slots(self) -> list[tuple[str, AlertSlot]]:
        return [(fp, s) for name in self.services() for fp, s in sorted(self._services[name].slots.items())
                if s.firing_since is not None]

    def slo_status(self) -> list[SloStatus]:
        """Every objective of every service with an SLO, as the burn rules see it (the worker's
        metrics read it: ``streams/stageseries.py``)."""
        out = []
        for name in self.services():
            for o in sorted(self.objectives(name), key=lambda o: o.key):
                burn = {w: b for p in o.pairs for w, b in ((p.alert.long_s, p.long_burn), (p.alert.short_s, p.short_burn))}
                out.append(SloStatus(name, o.key, o.remaining, dict(sorted(burn.items()))))
        return out

    def objectives(self, service: str) -> list[ObjectiveBurn]:
        """Each objective over all the service's nodes at its open minute: budget left over the
        SLO window and each pair's burn rates (the rules' own figures; [] for a service without
        an SLO or a minute)."""
        fs, slo = self._services.get(service), self.cfg.slo.get(service)
        if fs is None or slo is None or fs.open_minute is None:
            return []
        return objective_burns(fs.window, slo, fs.open_minute)

    def budgets(self, service: str) -> dict[str, float]:
        """Each objective's budget left over the SLO window at the service's open minute."""
        return {o.key: o.remaining for o in self.objectives(service)}

    def firing(self, service: str) -> tuple[str, ...]:
        """The fingerprints of the service's open SLO alerts."""
        fs = self._services.get(service)
        return () if fs is None else tuple(fp for fp, s in sorted(fs.slots.items()) if s.firing_since is not None)

    # ------------------------------------------------------------------ records

    def process(self, sli: ServiceSli, gate: float = math.inf) -> list[AlertTransition]:
        """Take one node's minute; returns the transitions of what this releases (maybe none
        while a slower node or the ``gate`` holds the service back)."""
        name = sli.service
        fs = self._services.get(name)
        if fs is None:
            fs = self._services[name] = FleetService()
            self._held[name] = ReorderBuffer()
        if sli.ts <= fs.received.get(sli.node, -math.inf):
            self.duplicates += 1
            return []
        fs.received[sli.node] = sli.ts
        fs.newest = max(fs.newest, sli.ts)
        if sli.ts <= fs.released:
            self.late += 1
            self._add(fs, sli)
        else:
            self._held[name].add(sli.ts, (sli.node,), encode(sli).decode())
        return self._release(name, fs, gate)

    def release(self, service: str, gate: float) -> list[AlertTransition]:
        """The gate moved on: apply what it and the service's nodes now allow."""
        fs = self._services.get(service)
        return [] if fs is None else self._release(service, fs, gate)

    def flush(self) -> list[AlertTransition]:
        """End of a finite input: apply what is held, then close every service's open minute."""
        out: list[AlertTransition] = []
        for name in self.services():
            fs = self._services[name]
            out += self._apply(name, fs, self._held[name].drain())
            if fs.open_minute is not None and fs.open_minute > fs.judged:
                out += self._evaluate(name, fs, fs.open_minute)
        return out

    def _release(self, name: str, fs: FleetService, gate: float) -> list[AlertTransition]:
        """Apply what the slowest live node and the gate allow; when they have both passed the
        open minute, every node's part of it is in: its rules run now, not a minute later."""
        floor = min(self._slowest(fs), gate)
        out = self._apply(name, fs, self._held[name].release(floor))
        if fs.open_minute is not None and fs.judged < fs.open_minute <= floor:
            out += self._evaluate(name, fs, fs.open_minute)
        return out

    def _slowest(self, fs: FleetService) -> float:
        """The newest ts of the service's slowest live node (less than ``summary_lateness``
        behind its newest); a node further behind no longer holds it back. Its newest is kept
        (a re-sent SLI of it is still a duplicate) for a day, then forgotten."""
        dead = fs.newest - self.lateness
        for node in [n for n, ts in fs.received.items() if ts < fs.newest - FORGET_S]:
            del fs.received[node]
        return min((ts for ts in fs.received.values() if ts > dead), default=math.inf)

    def _apply(self, name: str, fs: FleetService, items) -> list[AlertTransition]:
        out: list[AlertTransition] = []
        for ts, _, line in items:
            if fs.open_minute is not None and ts > fs.open_minute:
                if fs.open_minute > fs.judged:
                    out += self._evaluate(name, fs, fs.open_minute)
                if ts - MINUTE_S > fs.open_minute:  # after a gap: once more where the new minute starts
                    out += self._evaluate(name, fs, ts - MINUTE_S)
            if fs.open_minute is None or ts > fs.open_minute:
                fs.open_minute = ts
            fs.released = max(fs.released, ts)
            self._add(fs, decode(line.encode(), ServiceSli))
        return out

    def _add(self, fs: FleetService, sli: ServiceSli) -> None:
        start = sli.ts - MINUTE_S
        own = fs.nodes.get(sli.node)
        if own is None:
            own = fs.nodes[sli.node] = ServiceWindow()
        for w in (fs.window, own):
            if w.first_ts is None or start < w.first_ts:
                w.first_ts = start
        for c in sli.counts:
            ev = Events(c.good, c.total, c.undecided)
            fs.window.add_events(start, c.objective, ev)
            own.add_events(start, c.objective, ev)
            if c.note:
                fs.notes[c.objective] = c.note
        fs.model, fs.engine = sli.model or fs.model, sli.engine or fs.engine

    # ------------------------------------------------------------------ rules

    def _evaluate(self, name: str, fs: FleetService, now: float) -> list[AlertTransition]:
        fs.judged = now
        slo = self.cfg.slo.get(name)
        if slo is None:
            return []
        labels = {"service": name, "model": fs.model, "engine": fs.engine}
        verdicts = burn_verdicts(fs.window, slo, now, fs.nodes, fs.notes) + over_target(fs.window, slo, now, fs.nodes)
        out = [t for v in verdicts
               if (t := step_verdict(fs.slots, fingerprint(v.rule, {"service": name, **v.identity}), v, now,
                                     labels)) is not None]
        window = float(slo.window)
        fs.window.trim(now, window)
        for node in list(fs.nodes):
            w = fs.nodes[node]
            w.trim(now, window)
            if not w.hours:  # nothing of it left in the SLO window
                del fs.nodes[node]
        return out
