"""Alerts in a spool and a config pointing ``gpuwarden act`` at it, for the remediation tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from gpuwarden.contract import AlertState, AlertTransition, Tier, Topics, encode, simulated_labels
from gpuwarden.spool import Spool

T0 = 1_764_000_000.0


def alert(node: str, rule: str = "xid-hardware", fingerprint: str = "", *, state: AlertState = AlertState.FIRING,
          simulated: bool = False, ts: float = T0) -> AlertTransition:
    labels = {"node": node, "gpu": "2"}
    return AlertTransition(
        ts=ts, fingerprint=fingerprint or f"{rule}-{node}-fp0123456789", rule=rule, tier=Tier.CRITICAL, state=state,
        labels=simulated_labels(labels) if simulated else labels, started_at=T0,
        ended_at=ts if state is AlertState.RESOLVED else None,
        summary=f"{node} GPU 2: hardware XID", action="Drain the node")


def spool_alerts(path: Path, *transitions: AlertTransition) -> None:
    with Spool(path) as spool:
        spool.append_many((Topics().alerts, t.fingerprint, t.ts, encode(t)) for t in transitions)


def config(tmp: Path, **remediation: object) -> Path:
    """A config whose spool is ``tmp/spool.db`` and whose ``remediation:`` is ``remediation``."""
    path = tmp / "gpuwarden.yaml"
    path.write_text(yaml.safe_dump({"spool": {"path": str(tmp / "spool.db")}, "remediation": remediation}))
    return path
