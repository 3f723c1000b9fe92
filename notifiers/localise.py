"""Alert summaries and recommended actions in the reader's language, at render time.

The engine writes English into each transition (those bytes are the contract,
compared by the scenario tests and replays). For ``language: zh-CN`` the
default rules' text is rebuilt from the zh-CN catalogue
(``streams/default_rules.zh-CN.yaml``, keyed by rule name) with the same
names the engine filled its English template with, taken back from the
transition's labels and evidence. Only an alert whose English text is exactly
the default rule's is rewritten: a rule a lab overrides keeps its own words.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache, partial
from typing import Any

import yaml

from gpuwarden.contract import AlertTransition
from gpuwarden.notifiers.message import Notification
from gpuwarden.streams.evaluate import LIKELY_CAUSE, humanize, template_names
from gpuwarden.streams.rules import DEFAULT_RULES, RuleSpec, load_rule_file, render

CATALOGUES = {"zh-CN": DEFAULT_RULES.with_name("default_rules.zh-CN.yaml")}
LIKELY_CAUSE_IN = {"zh-CN": " 可能原因："}
DURATION_UNITS = {"zh-CN": ("秒", "分钟", "小时")}


@cache
def catalogue(language: str) -> dict[str, dict[str, Any]]:
    """Rule name → {summary, action, causes: [{summary, action}]} in ``language`` ({} for English)."""
    path = CATALOGUES.get(str(language))
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path else {}


@cache
def default_specs() -> dict[str, RuleSpec]:
    return {r.name: r for r in load_rule_file(DEFAULT_RULES).rules}


def localise_alert(a: AlertTransition, language: str) -> AlertTransition:
    """``a`` with its summary and action in ``language`` when its rule is a default one, else ``a``."""
    text, spec = catalogue(language).get(a.rule), default_specs().get(a.rule)
    if text is None or spec is None:
        return a
    ev = a.evidence.model_dump(exclude_none=True)
    names = template_names(a.labels, ev)
    en = render(spec.summary, names)
    cause_of = {en: None} | {en + LIKELY_CAUSE + render(c.summary, names): i for i, c in enumerate(spec.causes)}
    if a.summary not in cause_of:
        return a  # not the default rule's words (an override): leave them
    names = template_names(a.labels, ev, partial(humanize, units=DURATION_UNITS[str(language)]))
    summary, action = render(text["summary"], names), text["action"]
    if (i := cause_of[a.summary]) is not None:
        cause = text["causes"][i]
        summary += LIKELY_CAUSE_IN[str(language)] + render(cause["summary"], names)
        action = cause.get("action") or action
    return a.model_copy(update={"summary": summary, "action": render(action, names)})


def localise(n: Notification, language: str) -> Notification:
    """Every alert of ``n`` in ``language`` (English: unchanged)."""
    if not catalogue(language):
        return n
    return replace(n, alerts=[localise_alert(a, language) for a in n.alerts])
