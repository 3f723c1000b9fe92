"""``gpuwarden act FINGERPRINT drain|resume``: a person confirms the action an alert offers.

Composition root: the alert comes from the spool the notifier (or ``gpuwarden run``) keeps,
the action from :mod:`gpuwarden.remediation`, the audit record goes back into that spool.
``resume`` also finds its node from the audit trail, so it works after the alert resolved and
left the notifier's state.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import OrderedDict
from pathlib import Path

from gpuwarden.app.settings import Settings
from gpuwarden.contract import AlertTransition, ContractError, RemediationOutcome, RemediationRecord, Topics, decode
from gpuwarden.notifiers.control_cli import open_alerts, who
from gpuwarden.notifiers.followup import TOLD, follow_up, remediation_note
from gpuwarden.notifiers.pipeline import Notifier
from gpuwarden.remediation.act import Action, Remediator, SpoolAudit, Target, audit_trail, backend_for
from gpuwarden.remediation.backends import Backend, BackendError
from gpuwarden.spool import Spool

EXIT_OK, EXIT_FAIL = 0, 1


def last_transitions(spool: Spool, topics: Topics) -> dict[str, AlertTransition]:
    """Each alert's latest transition in the spool's alert history, firing or resolved."""
    latest: dict[str, AlertTransition] = {}
    for rec in spool.read(topics.alerts):
        try:
            t = decode(rec.value, AlertTransition)
        except ContractError:
            continue
        latest[t.fingerprint] = t
    return latest


def find_target(spool: Spool, settings: Settings, fp: str, action: str,
                firing: dict[str, AlertTransition] | None = None) -> Target | str:
    """The alert ``fp`` (or a unique prefix) names, or why there is none; ``firing``: the open
    alerts as the caller knows them (the console's view), else as the spool does."""
    topics = Topics(settings.kafka.topic_prefix)
    if firing is None:
        firing = open_alerts(settings, spool) or {}
    known: dict[str, Target] = {f: Target.of(t, firing=False) for f, t in last_transitions(spool, topics).items()}
    if action == "resume":  # a drain it made names the node even where the alert is gone
        for rec in audit_trail(spool, topics):
            if rec.action == "drain" and rec.outcome is RemediationOutcome.DONE and rec.fingerprint not in known:
                known[rec.fingerprint] = Target(rec.fingerprint, rec.rule, rec.node, firing=False)
    known.update({f: Target.of(t, firing=True) for f, t in firing.items()})
    hits = [f for f in known if f == fp] or [f for f in known if f.startswith(fp)]
    if len(hits) == 1:
        return known[hits[0]]
    if hits:
        return f"{fp!r} matches {len(hits)} alerts: {', '.join(sorted(hits)[:10])}"
    listed = "; ".join(f"{f} ({t.rule} on {t.node or '-'})" for f, t in sorted(known.items()) if t.firing)
    return f"no alert {fp!r}; open: {listed[:2000] or 'none'}"


def describe(rec: RemediationRecord) -> str:
    return f"{rec.action} {rec.node} ({rec.backend}): {rec.outcome.value} by {rec.by}" + (
        f" - {rec.detail}" if rec.detail else "")


def act_on(settings: Settings, fp: str, action: Action, by: str,
           firing: dict[str, AlertTransition] | None = None) -> RemediationRecord | str:
    """Do ``action`` for the alert ``fp`` as ``by``: its audit record, or why nothing was tried
    (no such alert, no spool to find it in, a backend without its configuration)."""
    path = Path(settings.spool.path)
    if firing is None and not path.exists():
        return f"no spool at {path}, so no alert {fp!r} (is --config the one gpuwarden run or notify uses?)"
    try:
        backend = backend_for(settings.remediation)
    except BackendError as e:
        return str(e)
    with Spool(path, settings.spool.max_bytes, settings.spool.max_age) as spool:
        target = find_target(spool, settings, fp, action, firing)
        if isinstance(target, str):
            return target
        rec = Remediator(backend, settings.remediation, SpoolAudit(spool, Topics(settings.kafka.topic_prefix))).act(
            target, action, by)
        alert = (firing or {}).get(target.fingerprint) or last_transitions(
            spool, Topics(settings.kafka.topic_prefix)).get(target.fingerprint)
        if alert is not None and rec.outcome in TOLD:  # in the alert's own conversation too
            language = settings.notify.language or settings.language
            follow_up(spool, alert, remediation_note(rec, language), rec.ts, language)
        return rec


def trail(settings: Settings, fp: str) -> list[RemediationRecord]:
    """The alert's audit records, oldest first (none without a spool)."""
    path = Path(settings.spool.path)
    if not path.exists():
        return []
    with Spool(path, settings.spool.max_bytes, settings.spool.max_age) as spool:
        return list(audit_trail(spool, Topics(settings.kafka.topic_prefix), fp))


def cmd_act(args: argparse.Namespace, settings: Settings) -> int:
    """Confirm an alert's action; exit 0 when done or already so, 1 when refused or failed."""
    rec = act_on(settings, args.fingerprint, args.action, who(args))
    if isinstance(rec, str):
        print(f"gpuwarden act: {rec}", file=sys.stderr)
        return EXIT_FAIL
    ok = rec.outcome in (RemediationOutcome.DONE, RemediationOutcome.ALREADY)
    print(describe(rec), file=sys.stdout if ok else sys.stderr)
    return EXIT_OK if ok else EXIT_FAIL


class AutoPolicy:
    """``remediation.auto``, applied as the notifier routes each transition (``gpuwarden run`` and
    ``gpuwarden notify``): the listed rules' firing alerts are drained at once, the audit record
    in the notifier's spool and the outcome told to the alert's receivers."""

    #: Episodes remembered as handled: an update or a redelivery of one is not a second attempt.
    REMEMBERED = 10_000

    def __init__(self, settings: Settings, backend: Backend) -> None:
        self.settings, self.backend = settings, backend
        self.language = settings.notify.language or settings.language
        self.handled: OrderedDict[tuple[str, float], None] = OrderedDict()

    @classmethod
    def of(cls, settings: Settings) -> AutoPolicy | None:
        """The policy, or None when no rule is listed; a backend without its configuration says so
        and is left out (alerts then wait for a person)."""
        if not settings.remediation.auto:
            return None
        try:
            backend = backend_for(settings.remediation)
        except BackendError as e:
            print(f"gpuwarden: remediation.auto is not applied: {e}", file=sys.stderr)
            return None
        return None if backend is None else cls(settings, backend)

    async def __call__(self, notifier: Notifier, t: AlertTransition) -> None:
        episode = (t.fingerprint, t.started_at)
        if t.rule not in self.settings.remediation.auto or notifier.spool is None or episode in self.handled:
            return
        spool = notifier.spool
        r = Remediator(self.backend, self.settings.remediation, SpoolAudit(spool, Topics(self.settings.kafka.topic_prefix)))
        rec = await asyncio.to_thread(r.on_transition, t)  # scontrol or the API server: the loop keeps going
        if rec is not None:
            self.handled[episode] = None
            while len(self.handled) > self.REMEMBERED:
                self.handled.popitem(last=False)
        if rec is not None and rec.outcome in TOLD:
            notifier.save_state()  # the router's groups name the receivers to tell
            follow_up(spool, t, remediation_note(rec, self.language), rec.ts, self.language)


def cmd_notify(args: argparse.Namespace, settings: Settings) -> int:
    """``gpuwarden notify`` with the remediation auto policy where the operator turned it on."""
    from gpuwarden.notifiers.worker import cmd_notify as worker  # Kafka's client: only for this command

    return worker(args, settings, on_routed=AutoPolicy.of(settings))
