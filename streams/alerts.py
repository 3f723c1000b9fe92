"""Alert lifecycle per (rule, entity): ``for`` before firing, ``keep_firing_for`` before resolving.

Pure state machine fed the condition's truth at evaluation instants (event time);
it returns a transition only on a state change, so output is idempotent and
replay gives the same transitions as live.
"""

from __future__ import annotations

import hashlib

from gpuwarden.contract import AlertState, AlertTransition, Baseline, Evidence, Tier
from gpuwarden.streams.statecodec import state


def fingerprint(rule: str, identity: dict[str, str]) -> str:
    """Stable hash of the rule and its identifying labels (order-independent)."""
    text = rule + "\x1f" + "\x1f".join(f"{k}={identity[k]}" for k in sorted(identity))
    return hashlib.sha256(text.encode()).hexdigest()[:20]


@state
class AlertSlot:
    """One rule on one entity: pending since, firing since, last time the condition held; what the
    alert says (``cause``: the index of the likely cause stated, -1 none; ``described_at``: when)."""

    __slots__ = ("rule", "pending_since", "firing_since", "last_true", "labels", "evidence",
                 "summary", "action", "tier", "cause", "described_at")
    ADDED = {"cause": lambda: None, "described_at": lambda: None}  # state written before causes were re-judged

    def __init__(self, rule: str) -> None:
        self.rule = rule
        self.pending_since: float | None = None
        self.firing_since: float | None = None
        self.last_true: float | None = None
        self.labels: dict = {}
        self.evidence: dict = {}
        self.summary = ""
        self.action = ""
        self.tier = ""
        self.cause: int | None = None
        self.described_at: float | None = None


def step(slot: AlertSlot, now: float, holds: bool, for_s: float, keep_s: float) -> str | None:
    """Advance the slot; returns "firing", "resolved" or None (no change)."""
    if holds:
        if slot.pending_since is None:
            slot.pending_since = now
        slot.last_true = now
        if slot.firing_since is None and now - slot.pending_since >= for_s:
            slot.firing_since = now
            return "firing"
        return None
    slot.pending_since = None
    if slot.firing_since is not None and slot.last_true is not None and now - slot.last_true >= keep_s:
        slot.firing_since = None
        return "resolved"
    return None


def transition(rule: str, fp: str, slot: AlertSlot, state_: str, now: float,
               started_at: float) -> AlertTransition:
    """Build the wire record (the only pydantic construction on the engine's path)."""
    ev = dict(slot.evidence)
    base = ev.pop("baseline", None)
    return AlertTransition(
        ts=now,
        fingerprint=fp,
        rule=rule,
        tier=Tier(slot.tier),
        state=AlertState(state_),
        labels=slot.labels,
        started_at=started_at,
        ended_at=now if state_ == "resolved" else None,
        summary=slot.summary,
        action=slot.action,
        evidence=Evidence(baseline=Baseline(**base) if base else None, **ev),
    )
