"""Rules that one event alone decides, judged when the event arrives (issue #18, defect 5).

Stage 1 holds every record ``allowed_lateness`` (30 s) of event time in its reorder buffer, so
that its results do not depend on arrival order; a GPU fallen off the bus paged that much late.
A rule with no ``for`` that holds on one matching event (``rules.arrival_trigger``: XID,
gpu_lost, ECC DBE, row remap, driver events in the default pack) is judged again as the event
arrives, on the node's state as it stands plus the events held in the buffer: when its alert is
neither firing nor announced, the firing transition goes out at once (an *announcement*) and is
remembered in the node's state (``NodeState.announced``).

The ordered evaluation, when the buffer releases the event, stays the authority. Its firing
transition for an announced fingerprint is dropped when it is the announcement byte for byte
(the usual case: it was sent already); when it differs (an older record that came later changed
the count, the labels or the firing time) it is sent too, a correction under the same
fingerprint, and counted in ``arrival_corrected``. So the transitions are those of the ordered
engine, some sent earlier: replay, in order or not, gives the same set.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuwarden.contract import AlertState, AlertTransition, GpuEvent, encode
from gpuwarden.streams.evaluate import fire_at
from gpuwarden.streams.nodecontext import NodeContext
from gpuwarden.streams.nodestate import GpuState, NodeState
from gpuwarden.streams.rules import Rule, Trigger, arrival_trigger


def event_fields(ev: GpuEvent) -> dict:
    """What the event logs keep of an event, and what count-within predicates read."""
    cat = ev.catalogue
    return {"kind": ev.kind.value, "code": ev.code, "gpu": ev.gpu_index, "n": max(1, ev.count),
            "action": cat.action if cat else None, "severity": cat.severity.value if cat else None}


@dataclass(frozen=True)
class ArrivalRule:
    rule: Rule
    trigger: Trigger


def arrival_rules(rules: list[Rule]) -> list[ArrivalRule]:
    """The rules of one scope that an event decides alone, in file order."""
    return [ArrivalRule(r, t) for r in rules if (t := arrival_trigger(r)) is not None]


class ArrivalContext(NodeContext):
    """The node's context, counting also ``held``: the events (``(ts, fields)``) not released yet."""

    def __init__(self, bucket_s: float) -> None:
        super().__init__(bucket_s)
        self.held: list[tuple[float, dict]] = []

    def count_events(self, since: float, pred: Callable[[dict], bool], per: str,
                     kinds: frozenset | None = None) -> int:
        n = super().count_events(since, pred, per, kinds)
        gpu = None if per != "gpu" or self.gpu is None else self.gpu.index
        if per == "gpu" and gpu is None:
            return n
        for ts, f in self.held:
            if since < ts <= self.now and (kinds is None or f["kind"] in kinds) and \
                    (gpu is None or f["gpu"] == gpu) and pred(f):
                n += f["n"]
        return n

    def has_events(self) -> bool:
        return True


def announce(st: NodeState, ev: GpuEvent, key: tuple, rules: list[ArrivalRule], ctx: ArrivalContext,
             gpu: GpuState | None, identity: dict[str, str], labels: dict[str, str]) -> list[AlertTransition]:
    """The firing transitions ``ev`` (its release order ``key``) decides for one entity (``gpu``,
    else the node) now, made before the buffer releases it; each is remembered in
    ``st.announced``. The buffered events it counts are those the buffer releases before it (as
    the ordered evaluation counts them), so an announcement made once later events are in does
    not count them."""
    fields = event_fields(ev)
    hits = [a for a in rules if a.trigger.pred(fields)]
    if not hits:
        return []
    alerts = st.alerts if gpu is None else gpu.alerts
    at = (ev.ts, key)
    ctx.held = [(t, event_fields(r)) for t, (k, _), r in st.buffer if type(r) is GpuEvent and (t, k) < at]
    ctx.held.append((ev.ts, fields))
    ctx.select(st, gpu=gpu)
    out = []
    for a in hits:
        t = fire_at(a.rule, ctx, ev.ts, identity, labels)
        if t is None or t.fingerprint in st.announced:
            continue
        slot = alerts.get(t.fingerprint)
        if slot is not None and (slot.firing_since is not None or slot.pending_since is not None):
            continue
        st.announced[t.fingerprint] = [ev.ts, encode(t).decode()]
        out.append(t)
    ctx.held = []
    return out


def confirm(st: NodeState, transitions: list[AlertTransition], mark: int) -> None:
    """Drop from ``transitions[mark:]`` (the ordered output of one released record) the firings
    announced already; keep, and count, those that differ; forget announcements the release
    passed without a firing (their event was set aside)."""
    announced, kept = st.announced, []
    for t in transitions[mark:]:
        sent = announced.pop(t.fingerprint, None) if t.state is AlertState.FIRING else None
        if sent is not None:
            if encode(t).decode() == sent[1]:
                continue
            st.corrected += 1
        kept.append(t)
    transitions[mark:] = kept
    for fp in [fp for fp, sent in announced.items() if sent[0] < st.released]:
        del announced[fp]
        st.corrected += 1
