"""Alert transitions and notifications for notifier tests."""

from __future__ import annotations

import re

from gpuwarden.contract import AlertState, AlertTransition, Evidence, Tier
from gpuwarden.notifiers.message import Notification

T0 = 1_767_225_600.0
FP = re.compile(r"fp\d{5}")
"""The number part of an :func:`alert` fingerprint, as found in rendered text."""


def alert(i: int, tier: Tier = Tier.ATTENTION, state: AlertState = AlertState.FIRING, ts: float = T0) -> AlertTransition:
    return AlertTransition(
        fingerprint=f"fp{i:05d}" + "a" * 11, rule="gpu_mem_leak", tier=tier, state=state, ts=ts,
        labels={"node": f"node-{i % 7}", "gpu": str(i % 8), "user": "alice", "task": "llama-train"},
        started_at=ts - 600, ended_at=ts if state == AlertState.RESOLVED else None,
        summary=f"GPU memory grows steadily on node-{i % 7}/gpu{i % 8}",
        action="Check the training loop for tensors kept across steps; restart from the last checkpoint.",
        evidence=Evidence(values={"mem_used_gib": 61.5}, held_for_s=900, slope=0.8, slope_unit="GiB/h"),
    )


def note(receiver: str, i: int, tier: Tier = Tier.ATTENTION, state: AlertState = AlertState.FIRING,
         at: float = T0) -> Notification:
    return Notification(receiver=receiver, group_key=f"g{i}", alerts=[alert(i, tier, state, at)],
                        reason="resolved" if state == AlertState.RESOLVED else "new", at=at,
                        id=f"n{i}" + ("-resolved" if state == AlertState.RESOLVED else ""))
