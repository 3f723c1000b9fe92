"""What delivery keeps in the spool: queued notifications, delivered ids, and the delivery log.

Queued notifications live in the record log under ``notify.outbox.<receiver>``
(ordered, unpublished until delivered); delivered ids in the kv store (so a
notification id is delivered at most once per receiver, across restarts); the
delivery log under ``notify.log`` (marked published at once: it is history, not
a queue).
"""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from gpuwarden.contract import AlertTransition, decode, encode
from gpuwarden.spool import Spool
from gpuwarden.notifiers.message import Notification

LOG_TOPIC = "notify.log"
DELIVERED_NS = "notify.delivered"


def outbox_topic(receiver: str) -> str:
    return f"notify.outbox.{receiver}"


def encode_notification(n: Notification) -> bytes:
    return json.dumps({
        "receiver": n.receiver, "group_key": n.group_key, "reason": n.reason, "at": n.at,
        "mentions": n.mentions, "escalation_level": n.escalation_level, "id": n.id,
        "alerts": [json.loads(encode(a)) for a in n.alerts],
    }, ensure_ascii=False).encode()


def decode_notification(data: bytes) -> Notification:
    d = json.loads(data)
    alerts = [decode(json.dumps(a), AlertTransition) for a in d.pop("alerts")]
    return Notification(alerts=alerts, **d)


class DeliveryLog:
    """Receiver, alert fingerprints, time, outcome, attempts: one entry per delivery decision."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool

    def record(self, *, at: float, receiver: str, notification_id: str, fingerprints: list[str],
               status: str, attempts: int, detail: str) -> None:
        entry = {"at": at, "receiver": receiver, "notification_id": notification_id,
                 "fingerprints": fingerprints, "status": status, "attempts": attempts, "detail": detail}
        rid = self.spool.append(LOG_TOPIC, json.dumps(entry, ensure_ascii=False).encode(), key=receiver, ts=at)
        self.spool.mark_published([rid])

    def read(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest ``limit`` entries, oldest first."""
        last: deque[bytes] = deque(maxlen=max(0, limit))
        for rec in self.spool.read(LOG_TOPIC):
            last.append(rec.value)
        return [json.loads(v) for v in last]


class Delivered:
    """Ids already delivered per receiver (idempotency across retries, digests and restarts)."""

    def __init__(self, spool: Spool) -> None:
        self.spool = spool

    def __contains__(self, key: tuple[str, str]) -> bool:
        return self.spool.kv_get(DELIVERED_NS, "\x1f".join(key)) is not None

    def add(self, receiver: str, ids: list[str], at: float) -> None:
        self.spool.kv_put_many(DELIVERED_NS, [(f"{receiver}\x1f{i}", str(at).encode()) for i in ids])
