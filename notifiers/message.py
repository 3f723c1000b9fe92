"""What the router hands to delivery: one notification for one receiver.

The router (pure policy) decides *who* hears *what* and *when*; channels decide
*how it looks* on each platform; delivery does the HTTP. This dataclass is the
seam between them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpuwarden.contract import AlertTransition

Reason = Literal["new", "update", "repeat", "resolved", "escalation", "digest", "test", "ack"]


@dataclass(slots=True)
class Notification:
    receiver: str
    """Receiver name from the config's ``notify.receivers``."""
    group_key: str
    """Stable key of the alert group (route + group_by label values)."""
    alerts: list[AlertTransition]
    """The group's alerts, firing and just resolved, in a stable order."""
    reason: Reason
    at: float
    """When the router decided to send (its clock: event time in simulation, wall time live)."""
    mentions: list[str] = field(default_factory=list)
    """On-call people to @-mention (platform ids/mobiles resolved by the channel)."""
    escalation_level: int = 0
    id: str = ""
    """Idempotency id: the same id is delivered at most once per receiver."""
