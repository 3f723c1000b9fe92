"""Alerts in a spool and a config pointing ``gpuwarden act`` at it, for the remediation tests."""

from __future__ import annotations

import re
import time
from pathlib import Path

import yaml

from gpuwarden.contract import AlertState, AlertTransition, Tier, Topics, encode, simulated_labels
from gpuwarden.spool import Spool
from tests.slurm_support import LocalSlurm

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


def node_state(slurm: LocalSlurm, name: str) -> tuple[str, str]:
    """(State, Reason) as ``scontrol show node`` prints them."""
    line = slurm.run("scontrol", "show", "node", "-o", name)
    state = re.search(r"\bState=(\S+)", line).group(1)
    reason = m.group(1).split(" [")[0] if (m := re.search(r" Reason=(.*)", line)) else ""
    return state, reason


def settled(slurm: LocalSlurm, name: str) -> tuple[str, str]:
    """(State, Reason) once the controller heard from the node: a resume marks it NOT_RESPONDING
    until its slurmd answers the ping the resume sends (slurmctld's update_node)."""
    deadline = time.monotonic() + 300  # returns once it answers: the bound only catches a hang (#33)
    while "NOT_RESPONDING" in (got := node_state(slurm, name))[0]:
        assert time.monotonic() < deadline, f"{name} not responding 300 s after a resume"
        time.sleep(0.3)
    return got
