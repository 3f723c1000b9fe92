"""A note about an alert, queued to the receivers its messages went to: how a drain or resume
(docs/remediation.md) is told in the alert's own conversation.

The receivers come from the router state the notifier saves in the spool (the groups holding the
alert, the receivers its page reached); the note is a notification of reason ``update`` carrying
the alert with the note after its summary, queued in each receiver's outbox, which the running
notifier drains on its next tick (or at its next start). Another process (``gpuwarden act``)
may queue it: the outbox is the spool's record log.
"""

from __future__ import annotations

import hashlib
import json

from gpuwarden.contract import AlertTransition, RemediationOutcome, RemediationRecord
from gpuwarden.spool import Spool
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.outbox import encode_notification, outbox_topic
from gpuwarden.notifiers.pipeline import STATE_KEY, STATE_NS

#: How the note joins the alert's summary, per language.
JOIN = {"en": "{summary} — {note}", "zh-CN": "{summary}——{note}"}
#: A remediation record in words, per language.
DID = {"en": "{action} {node} through {backend}: {outcome}, by {by}",
       "zh-CN": "{action} {node}（{backend}）：{outcome}，操作人 {by}"}
ACTIONS = {"zh-CN": {"drain": "下线（drain）", "resume": "恢复上线（resume）"}}
OUTCOMES = {"zh-CN": {"done": "已完成", "already": "本已如此", "refused": "已拒绝", "failed": "失败"}}
#: Outcomes told in the alert's conversation: a change, or a failure someone must know of.
TOLD = (RemediationOutcome.DONE, RemediationOutcome.FAILED)


def remediation_note(rec: RemediationRecord, language: str = "en") -> str:
    """``drain gn1 through slurm: done, by alice`` (with the scheduler's answer on a failure)."""
    lang = language if language in DID else "en"
    text = DID[lang].format(action=ACTIONS.get(lang, {}).get(rec.action, rec.action), node=rec.node,
                            backend=rec.backend, outcome=OUTCOMES.get(lang, {}).get(rec.outcome.value, rec.outcome.value),
                            by=rec.by)
    return f"{text} ({rec.detail})" if rec.outcome is RemediationOutcome.FAILED else text


def receivers_of(spool: Spool, fingerprint: str) -> list[str]:
    """The receivers the router sent (or holds) alert ``fingerprint`` for, as its saved state says."""
    data = spool.kv_get(STATE_NS, STATE_KEY)
    try:
        st = json.loads(data) if data else {}
        out = {g["receiver"] for g in st.get("groups", ()) if any(a["fingerprint"] == fingerprint for a in g["alerts"])}
        out |= {r for p in st.get("pages", ()) if p["alert"]["fingerprint"] == fingerprint for r in p["receivers"]}
    except (KeyError, TypeError, ValueError):
        return []
    return sorted(out)


def follow_up(spool: Spool, alert: AlertTransition, note: str, at: float, language: str = "en") -> list[str]:
    """Queue ``note`` about ``alert`` to its receivers; the receivers it went to."""
    said = alert.model_copy(update={"summary": JOIN.get(language, JOIN["en"]).format(summary=alert.summary, note=note)})
    sent = []
    for receiver in receivers_of(spool, alert.fingerprint):
        nid = hashlib.sha256(f"{receiver}\x1f{alert.fingerprint}\x1f{note}\x1f{at!r}".encode()).hexdigest()[:24]
        n = Notification(receiver=receiver, group_key=f"note/{alert.fingerprint}", alerts=[said], reason="update",
                         at=at, id=nid)
        spool.append(outbox_topic(receiver), encode_notification(n), key=nid, ts=at)
        sent.append(receiver)
    return sent
