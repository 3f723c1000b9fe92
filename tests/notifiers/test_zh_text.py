"""zh-CN text reads as written by a person: every default rule's summary, causes, resolve and action
from ``default_rules.zh-CN.yaml``, and a rendered message.

The conventions checked (those of Chinese technical writing, as in the W3C "Requirements for
Chinese Text Layout" and common style guides): durations in Chinese units written ``1 小时 5 分钟``;
a space only between a Chinese character and a number or Latin word, never between two Chinese
characters or next to full-width punctuation; full-width punctuation (``：，；（）``) after Chinese;
evidence named in words, not by metric identifiers.
"""

from __future__ import annotations

import re
from functools import partial

import pytest

from gpuwarden.alert_text import template_names
from gpuwarden.contract import Baseline, Evidence
from gpuwarden.humantime import span
from gpuwarden.notifiers.localise import (CHECKPOINT_WORDS_IN, DURATION_UNITS, LIKELY_CAUSE_IN, catalogue,
                                          localise_alert)
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.render import Locale, metric_words, render_text
from gpuwarden.streams.metrics import SCOPES
from tests.fakes.alerts import T0, alert

ZH = "zh-CN"
CJK = r"\u3000-\u303f\u4e00-\u9fff\uff00-\uffef"
SPACE_INSIDE = re.compile(f"[{CJK}] +[{CJK}]")
ASCII_PUNCT_AFTER = re.compile(f"[\u4e00-\u9fff][:;,!?()]")
ENGLISH_DURATION = re.compile(r"\b\d+ ?(?:h|m|s|min|sec|hours?|minutes?|seconds?|days?)\b|\d+[hm]\d+[ms]\b")


def problems(text: str) -> list[str]:
    out = [f"space inside Chinese: {m.group(0)!r}" for m in SPACE_INSIDE.finditer(text)]
    out += [f"ASCII punctuation after Chinese: {m.group(0)!r}" for m in ASCII_PUNCT_AFTER.finditer(text)]
    out += [f"English duration: {m.group(0)!r}" for m in ENGLISH_DURATION.finditer(text)]
    return out


#: Names a template may use, as the alerts fill them: labels Latin, durations spoken, figures numbers.
LABELS = {"node": "node-07", "gpu": "3", "job": "train-42", "queue": "gpu", "service": "llm-api",
          "task": "llama-train", "task_class": "llm-pretrain", "user": "alice", "worst_node": "node-02",
          "objective": "ttft-p99", "metric": "step_time_s", "slope_unit": "GiB/h", "baseline": "0.42"}
SECONDS = {"held_for_s": 3900.0, "window_s": 3600.0}
SPOKEN_S = {"time_to_oom_s": 1500.0, "wait_s": 5400.0}


class Figures(dict):
    """A figure for every name not given: templates format most with ``.0f``, ``.0%``, ``g``…"""

    def __missing__(self, key: str) -> float:
        return 12.5


def names() -> dict:
    ev = {"values": {**SPOKEN_S, "ckpt_released": 0.0}, **SECONDS, "count": 3}
    named = template_names(LABELS, ev, partial(span, units=DURATION_UNITS[ZH]), CHECKPOINT_WORDS_IN[ZH])
    return Figures(named)


def texts(entry: dict) -> list[str]:
    out = [entry["summary"], entry.get("action", "")]
    for cause in entry.get("causes", []):
        out += [entry["summary"] + LIKELY_CAUSE_IN[ZH] + cause["summary"], cause.get("action") or ""]
    if "resolved" in entry:
        out.append(entry["resolved"]["summary"])
    return [t for t in out if t]


@pytest.mark.parametrize("rule", sorted(catalogue(ZH)))
def test_every_default_rule_reads_as_chinese(rule: str) -> None:
    filled = [t.format_map(names()) for t in texts(catalogue(ZH)[rule])]
    assert [p for t in filled for p in problems(t)] == [], filled


def test_durations_are_in_chinese_units_the_same_way_everywhere() -> None:
    n = names()
    assert (n["held_for"], n["window"], n["time_to_oom"]) == ("1 小时 5 分钟", "1 小时", "25 分钟")


def test_a_rendered_message_names_evidence_in_words_with_chinese_durations_and_punctuation() -> None:
    base = alert(1)
    a = base.model_copy(update={"evidence": Evidence(
        values={"hw_slowdown_avg": 0.65, "mem_used_gib": 61.5, "temp_gpu_c_start": 70.0, "util_gpu": 3.0},
        held_for_s=3900, window_s=1800, slope=0.8, slope_unit="GiB/h", count=2,
        baseline=Baseline(median=1.0, mad=0.1, low=0.5, high=1.5, samples=30))})
    a = localise_alert(a, ZH)
    title, body = render_text(Notification(receiver="x", group_key="g", alerts=[a], reason="new", at=T0), Locale(ZH))
    (evidence,) = [line for line in body.splitlines() if line.startswith("证据")]
    assert "hw_slowdown" not in evidence and "mem_used_gib" not in evidence and "=" not in evidence
    assert "硬件降速占比均值 0.65" in evidence and "持续 1 小时 5 分钟" in evidence and "窗口 30 分钟" in evidence
    shown = [line for line in [title, *body.splitlines()] if not line.startswith("`")]  # ids: rule, fingerprint
    assert [p for line in shown for p in problems(line)] == [], shown


def test_every_metric_has_chinese_words() -> None:
    missing = sorted(m for scope in SCOPES.values() for m in scope if metric_words(m, ZH) == m)
    assert missing == []
