"""Receivers that refuse our messages (a rotated secret, a bot removed): the meta alert about them.

When a receiver answers with an authentication or signature failure that re-reading its secrets
does not cure, delivery records a :class:`Refusal` here, in the spool (so the console, another
process, shows it) and raises a meta alert through the other receivers: "Feishu room team-a
refuses our messages: sign match fail (19021) since 10:42". Its first success resolves it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from datetime import datetime, tzinfo

from gpuwarden.contract import AlertState, AlertTransition, Tier
from gpuwarden.spool import Spool

#: Spool key-value namespace: receiver name → its refusal as JSON.
REFUSING_NS = "notify.refusing"
RULE = "receiver_refuses"
#: Receiver kinds that page someone: the meta alert (attention) is not sent to them.
PAGING = frozenset({"pagerduty"})
#: What a receiver of each kind is to its readers.
_NOUNS = {"feishu": "Feishu room", "dingtalk": "DingTalk room", "wecom": "WeCom room", "slack": "Slack channel",
          "pagerduty": "PagerDuty service", "email": "email receiver"}


@dataclass(frozen=True, slots=True)
class Refusal:
    receiver: str
    kind: str
    since: float
    reason: str
    """The platform's own words and code, e.g. ``sign match fail (19021)``: never a secret."""

    def summary(self, tz: tzinfo) -> str:
        noun = _NOUNS.get(self.kind, f"{self.kind} receiver")
        since = datetime.fromtimestamp(self.since, tz).strftime("%H:%M")
        return f"{noun} {self.receiver} refuses our messages: {self.reason} since {since}"

    def transition(self, state: AlertState, now: float, tz: tzinfo) -> AlertTransition:
        """The meta alert, firing or resolved, keyed by the receiver."""
        return AlertTransition(
            fingerprint=hashlib.sha256(f"{RULE}/{self.receiver}".encode()).hexdigest()[:16], rule=RULE,
            tier=Tier.ATTENTION, state=state, labels={"receiver": self.receiver, "channel": self.kind},
            started_at=self.since, ended_at=now if state == AlertState.RESOLVED else None, ts=now,
            summary=self.summary(tz),
            action=("Check the receiver's secret (its env or file) and the bot's settings on the platform; "
                    "the notifier re-reads secrets on SIGHUP. Its messages go to its fallback meanwhile."))


def save(spool: Spool, refusal: Refusal) -> None:
    spool.kv_put(REFUSING_NS, refusal.receiver, json.dumps(asdict(refusal)).encode())


def forget(spool: Spool, receiver: str) -> None:
    spool.kv_delete(REFUSING_NS, receiver)


def read_all(spool: Spool) -> list[Refusal]:
    """Every receiver refusing now, as the notifier using ``spool`` last saw it."""
    return [Refusal(**json.loads(v)) for _, v in sorted(spool.kv_items(REFUSING_NS))]
