"""What an alert offers, and doing it once a person (or an operator's auto policy) said so.

Every attempt, done or not, becomes a :class:`~gpuwarden.contract.RemediationRecord` handed to
the audit sink (the spool's ``remediation`` topic): who asked, when, what the scheduler was
told and what it answered. Failing safe means: nothing on a simulated alert; no drain for an
alert that has resolved; no second drain of a node already drained (whoever drained it, its
reason is kept); ``resume`` only undoes a gpuwarden drain; an unreachable scheduler is a
``failed`` record and an exit status, never a retry loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpuwarden.contract import (AlertState, AlertTransition, ContractError, RemediationAction, RemediationOutcome,
                                RemediationRecord, Topics, decode, encode, is_simulated)
from gpuwarden.remediation.backends import (REASON_PREFIX, Backend, BackendError, CommandBackend, KubernetesBackend,
                                            SlurmBackend)
from gpuwarden.remediation.config import RemediationConfig
from gpuwarden.spool import Spool

Action = RemediationAction
AUTO_PREFIX = "auto:"


@dataclass(frozen=True, slots=True)
class Offer:
    """What an alert offers: the action and the node it applies to."""

    fingerprint: str
    rule: str
    node: str
    action: Action = "drain"


@dataclass(frozen=True, slots=True)
class Target:
    """The alert an action is asked for, as the caller knows it now."""

    fingerprint: str
    rule: str
    node: str
    firing: bool
    """Still open now (the caller's alert state); a drain needs it."""
    simulated: bool = False

    @classmethod
    def of(cls, t: AlertTransition, firing: bool | None = None) -> Target:
        """``t``, firing as its state says unless the caller knows better."""
        return cls(t.fingerprint, t.rule, t.labels.get("node", ""),
                   t.state is AlertState.FIRING if firing is None else firing, is_simulated(t.labels))

    @property
    def reason(self) -> str:
        """What the scheduler keeps as the drain's reason: ``gpuwarden: <rule> <alert id>``."""
        return f"{REASON_PREFIX} {self.rule} {self.fingerprint}"


def offer(cfg: RemediationConfig, t: AlertTransition) -> Offer | None:
    """The drain a firing alert offers, if remediation is on, its rule offers one, it names a
    node and it was not raised from simulated records."""
    node = t.labels.get("node")
    if (cfg.backend == "off" or t.state is not AlertState.FIRING or t.rule not in cfg.offer or not node
            or is_simulated(t.labels)):
        return None
    return Offer(t.fingerprint, t.rule, node)


def backend_for(cfg: RemediationConfig) -> Backend | None:
    """The configured backend, or None when remediation is off. Builds no connection for
    Slurm and commands; Kubernetes loads its configuration (BackendError when it has none)."""
    if cfg.backend == "slurm":
        return SlurmBackend(cfg.slurm.scontrol, str(cfg.slurm.conf) if cfg.slurm.conf else None, cfg.timeout)
    if cfg.backend == "kubernetes":
        k = cfg.kubernetes
        return KubernetesBackend.connect(str(k.kubeconfig) if k.kubeconfig else None, taint_key=k.taint_key,
                                         taint_effect=k.taint_effect, timeout_s=cfg.timeout)
    if cfg.backend == "command":
        c = cfg.command
        return CommandBackend(c.drain, c.resume, c.status, cfg.timeout)
    return None


class Remediator:
    """Decides and acts; ``audit`` receives every attempt's record."""

    def __init__(self, backend: Backend | None, config: RemediationConfig,
                 audit: Callable[[RemediationRecord], None], clock: Callable[[], float] = time.time) -> None:
        self.backend, self.config, self.audit, self.clock = backend, config, audit, clock

    def offer(self, t: AlertTransition) -> Offer | None:
        return offer(self.config, t) if self.backend is not None else None

    def on_transition(self, t: AlertTransition) -> RemediationRecord | None:
        """The auto policy: a firing alert of a rule the operator listed in ``auto`` is drained
        without asking; anything else is left for a person."""
        if t.rule in self.config.auto and self.offer(t) is not None:
            return self.act(Target.of(t), "drain", f"{AUTO_PREFIX}{t.rule}")
        return None

    def act(self, t: Target, action: Action, by: str) -> RemediationRecord:
        """Do ``action`` for the alert ``t``, recorded as asked by ``by``."""
        node = t.node
        reason = t.reason if action == "drain" else ""

        def record(outcome: RemediationOutcome, detail: str) -> RemediationRecord:
            rec = RemediationRecord(ts=self.clock(), node=node or "-", action=action,
                                    backend=self.backend.name if self.backend else "off", outcome=outcome,
                                    by=by, fingerprint=t.fingerprint, rule=t.rule, reason=reason, detail=detail)
            self.audit(rec)
            return rec

        refused = self._refusal(t, action)
        if refused:
            return record(RemediationOutcome.REFUSED, refused)
        assert self.backend is not None
        try:
            status = self.backend.status(node)
            if action == "drain":
                if status.drained:
                    whose = "by gpuwarden" if status.ours else "by someone else"
                    return record(RemediationOutcome.ALREADY,
                                  f"{node} already drained {whose} ({status.state}: {status.reason or 'no reason'}); "
                                  "left as it is")
                said = self.backend.drain(node, reason)
            else:
                if status.drained is False:
                    return record(RemediationOutcome.ALREADY, f"{node} is not drained ({status.state})")
                if status.drained and not status.ours:
                    return record(RemediationOutcome.REFUSED,
                                  f"{node} was drained by someone else ({status.reason or 'no reason'}); "
                                  "gpuwarden resumes only its own drains")
                said = self.backend.resume(node)
            after = self.backend.status(node)
        except BackendError as e:
            return record(RemediationOutcome.FAILED, str(e))
        return record(RemediationOutcome.DONE, "; ".join(x for x in (said, f"now {after.state}" if after.state else "")
                                                         if x))

    def _refusal(self, t: Target, action: Action) -> str:
        """Why ``action`` must not run for ``t`` (empty: it may)."""
        if t.simulated:
            return "a simulated alert: gpuwarden never acts on those"
        if self.backend is None:
            return "remediation.backend is off"
        if not t.node:
            return f"the alert ({t.rule}) names no node"
        if action == "drain":
            if t.rule not in self.config.offer:
                return f"rule {t.rule} offers no drain (remediation.offer)"
            if not t.firing:
                return "the alert has resolved; nothing drained"
        return ""


# --------------------------------------------------------------------------- the audit trail


class SpoolAudit:
    """Appends audit records to the spool's ``remediation`` topic (``gpuwarden export`` carries them)."""

    def __init__(self, spool: Spool, topics: Topics) -> None:
        self.spool, self.topic = spool, topics.remediation

    def __call__(self, rec: RemediationRecord) -> None:
        self.spool.append(self.topic, encode(rec), key=rec.node, ts=rec.ts)


def audit_trail(spool: Spool, topics: Topics, fingerprint: str | None = None) -> Iterator[RemediationRecord]:
    """The audit records in the spool, oldest first; only one alert's with ``fingerprint``."""
    for row in spool.read(topics.remediation):
        try:
            rec = decode(row.value, RemediationRecord)
        except ContractError:
            continue
        if fingerprint is None or rec.fingerprint == fingerprint:
            yield rec
