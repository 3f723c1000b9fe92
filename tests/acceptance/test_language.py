"""``language: zh-CN``: the summary and the recommended action are Chinese too; times in ``timezone``."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest
import yaml

from gpuwarden.app.settings import load_settings
from gpuwarden.config import ConfigError
from gpuwarden.contract import AlertState
from gpuwarden.spool import Spool
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.localise import catalogue
from gpuwarden.notifiers.pipeline import Notifier
from gpuwarden.notifiers.repeat import SUMMARY as REPEAT_SUMMARY
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import DEFAULT_RULES, load_rule_file
from gpuwarden.streams.schedtext import RESOLVED as SCHED_RESOLVED
from gpuwarden.streams.schedtext import TEXT as SCHED_TEXT
from gpuwarden.streams.servingrules import TEXT as SERVING_TEXT
from tests.acceptance.platforms import Feishu
from tests.fakes.clock import SimClock

START = 1_767_225_600.0  # 2026-01-01 00:00 UTC
CJK = re.compile(r"[\u4e00-\u9fff]")


def placeholders(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_default_rule_has_a_zh_cn_summary_and_action_with_the_same_placeholders() -> None:
    zh = catalogue("zh-CN")
    rules = load_rule_file(DEFAULT_RULES).rules
    assert set(zh) == {rule.name for rule in rules} | set(SERVING_TEXT) | set(SCHED_TEXT) | set(REPEAT_SUMMARY)
    for name, summary in REPEAT_SUMMARY.items():  # the repeat-offender attentions, written by the notifier
        assert zh[name]["en"] == summary and CJK.search(zh[name]["summary"]) and CJK.search(zh[name]["action"])
        assert placeholders(zh[name]["summary"]) == placeholders(summary), name
    for name, text in SERVING_TEXT.items():  # the inference rules' built-in templates
        assert zh[name]["en"] == text.summary, name
        assert placeholders(zh[name]["summary"]) == placeholders(text.summary), name
        assert placeholders(zh[name]["action"]) == placeholders(text.action), name
        assert CJK.search(zh[name]["summary"]) and CJK.search(zh[name]["action"]), name
    for name, (summary, _) in SCHED_TEXT.items():  # the scheduler's rules, written in code
        assert zh[name]["en"] == summary and CJK.search(zh[name]["summary"]) and CJK.search(zh[name]["action"])
        assert placeholders(zh[name]["summary"]) == placeholders(summary), name
        assert ("resolved" in zh[name]) == (name in SCHED_RESOLVED), name
    for name, summary in SCHED_RESOLVED.items():  # their resolves, in their own words
        assert zh[name]["resolved"]["en"] == summary and CJK.search(zh[name]["resolved"]["summary"]), name
        assert placeholders(zh[name]["resolved"]["summary"]) == placeholders(summary), name
    for rule in rules:
        text = zh[rule.name]
        assert text["en"] == rule.summary, rule.name  # the msgid is the default rule's own template
        assert CJK.search(text["summary"]) and CJK.search(text["action"]), rule.name
        assert placeholders(text["summary"]) == placeholders(rule.summary), rule.name
        assert len(text.get("causes", [])) == len(rule.causes), rule.name
        for mine, theirs in zip(text.get("causes", []), rule.causes):
            assert mine["en"] == theirs.summary, rule.name
            assert placeholders(mine["summary"]) == placeholders(theirs.summary), rule.name
            assert CJK.search(mine["action"]), rule.name


async def test_zh_cn_messages_carry_chinese_summaries_and_actions_with_times_in_the_zone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = Engine()
    sim = Simulator("mixed", nodes=2, gpus=8, seed=3, start_ts=START, tick_s=10.0, onset_s=600)
    transitions = [t for t in engine.process_many(sim.run(3 * 3600)) + engine.flush()
                   if t.state == AlertState.FIRING]
    english = {t.summary for t in transitions} | {t.action for t in transitions}
    clock = SimClock(START + 3 * 3600)
    with Feishu(clock=clock) as chat, Spool(tmp_path / "spool.db") as spool:
        monkeypatch.setenv("URL_CHAT", chat.url)
        cfg = tmp_path / "gpuwarden.yaml"
        cfg.write_text(yaml.safe_dump({"notify": {
            "language": "zh-CN", "timezone": "Asia/Shanghai",
            "receivers": [{"name": "chat", "feishu": {"url": {"env": "URL_CHAT"}}, "accept_simulated": True}],
            "route": {"receivers": ["chat"], "group_by": ["..."], "group_wait": "0s"}}}))
        s = load_settings(cfg)
        d = Delivery(s.notify.receivers, spool=spool, language="zh-CN", timezone=s.notify.timezone,
                     clock=clock, sleep=clock.sleep)
        n = Notifier(s, spool=spool, clock=clock, delivery=d)
        try:
            for t in transitions:
                await n.handle(t)
            await d.wait_idle()
        finally:
            await n.aclose()
    bodies = [h.json["card"]["elements"][0]["text"]["content"] for h in chat.accepted]
    assert bodies and len({t.rule for t in transitions}) >= 10  # most of the rule pack fired
    for body in bodies:
        assert not [e for e in english if e and e in body], body  # no English summary or action left
        lines = [ln for ln in body.splitlines() if ln.startswith("[") or ln.startswith("建议操作")]
        assert lines and all(len(CJK.findall(ln)) >= 4 for ln in lines), lines
        assert "开始于 2026年1月1日 " in body and " CST" in body  # UTC+8, in human form


def test_a_bad_timezone_fails_at_start_naming_the_file_and_key(tmp_path: Path) -> None:
    cfg = tmp_path / "gpuwarden.yaml"
    cfg.write_text(yaml.safe_dump({"notify": {"timezone": "Mars/Olympus_Mons"}}))
    with pytest.raises(ConfigError) as e:
        load_settings(cfg)
    text = str(e.value)
    assert str(cfg) in text and "notify.timezone" in text and "IANA time zone" in text


def test_a_scheduler_resolve_in_its_own_words_is_translated_too() -> None:
    """A scheduler alert's resolve says the figures at resolution in ``RESOLVED``'s words (#19);
    a zh-CN reader gets those in Chinese, the firing's in Chinese as before."""
    from gpuwarden.notifiers.localise import localise_alert
    from tests.streams.test_schedstage import fragmented_polls

    engine = Engine()
    firing, resolved = engine.process_many(fragmented_polls(0, 1200, big_starts=900))
    assert resolved.summary.startswith("job 3 (alice, gpu) is no longer held by fragmentation")
    zh = localise_alert(resolved, "zh-CN").summary
    assert zh == "作业 3（alice，gpu）已不再受资源碎片化阻塞：其分区现有 2 张空闲 GPU，单节点最多 2 张。"
    assert CJK.search(localise_alert(firing, "zh-CN").summary)
