"""Alert summaries and recommended actions in the reader's language, at render time.

The engine writes English into each transition (those bytes are the contract,
compared by the scenario tests and replays). For ``language: zh-CN`` the
default rules' text is rebuilt from the zh-CN catalogue beside this module
(``default_rules.zh-CN.yaml``, keyed by rule name) with the same names the
engine filled its English template with, taken back from the transition's
labels and evidence. Each entry carries the default rule's English template
(``en``), so only an alert whose English text is exactly that template filled
in is rewritten: a rule a lab overrides keeps its own words.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache, partial
from importlib import resources
from typing import Any

import yaml

from gpuwarden.alert_text import LIKELY_CAUSE, fill, template_names
from gpuwarden.humantime import span
from gpuwarden.contract import AlertTransition
from gpuwarden.notifiers.message import Notification

CATALOGUES = {"zh-CN": "default_rules.zh-CN.yaml"}
RESOLVED = -1  # a summary that is the entry's ``resolved`` template filled in
LIKELY_CAUSE_IN = {"zh-CN": "可能原因："}
DURATION_UNITS = {"zh-CN": ("秒", "分钟", "小时", "天")}
#: ``{checkpoint}`` in each language (``gpuwarden.alert_text.CHECKPOINT_WORDS``, in its order).
CHECKPOINT_WORDS_IN = {"zh-CN": ("未见已完成的检查点", "上次检查点后未释放", "上次检查点后已释放",
                                  "增长开始以来没有完成的检查点", "增长开始以来完成的检查点：{n} 次",
                                  "，最后一次之后未释放", "，最后一次之后已释放")}


@cache
def catalogue(language: str) -> dict[str, dict[str, Any]]:
    """Rule name → {en, summary, action, causes: [{en, summary, action}], resolved: {en, summary}} in
    ``language`` ({} for English)."""
    name = CATALOGUES.get(language)
    if name is None:
        return {}
    return yaml.safe_load(resources.files("gpuwarden.notifiers").joinpath(name).read_text(encoding="utf-8"))


def localise_alert(a: AlertTransition, language: str) -> AlertTransition:
    """``a`` with its summary and action in ``language`` when its text is a default rule's, else ``a``."""
    text = catalogue(language).get(a.rule)
    if text is None:
        return a
    ev = a.evidence.model_dump(exclude_none=True)
    names = template_names(a.labels, ev)
    en = fill(text["en"], names)
    causes = text.get("causes", [])
    cause_of: dict[str, int | None] = {en: None} | {en + LIKELY_CAUSE + fill(c["en"], names): i
                                                     for i, c in enumerate(causes)}
    resolved = text.get("resolved")  # a scheduler rule's resolve in its own words (streams/schedtext.py)
    if resolved is not None:
        cause_of[fill(resolved["en"], names)] = RESOLVED
    if a.summary not in cause_of:
        return a  # not the default rule's words (an override): leave them
    names = template_names(a.labels, ev, partial(span, units=DURATION_UNITS[language]),
                           CHECKPOINT_WORDS_IN[language])
    summary, action = fill(text["summary"], names), text["action"]
    if (i := cause_of[a.summary]) == RESOLVED:
        summary = fill(resolved["summary"], names)
    elif i is not None:
        cause = causes[i]
        summary += LIKELY_CAUSE_IN[language] + fill(cause["summary"], names)
        action = cause.get("action") or action
    return a.model_copy(update={"summary": summary, "action": fill(action, names)})


def localise(n: Notification, language: str) -> Notification:
    """Every alert of ``n`` in ``language`` (English: unchanged)."""
    if not catalogue(language):
        return n
    return replace(n, alerts=[localise_alert(a, language) for a in n.alerts])
