"""Message text in English or Simplified Chinese, shared by every channel.

Channels wrap this text in their own envelope (Block Kit, Feishu card, DingTalk
markdown, …); the words, the evidence and the recommended action are decided
once here so every platform tells the same story.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from gpuwarden.contract import AlertState, AlertTransition, Evidence, Tier
from gpuwarden.humantime import UNITS, span
from gpuwarden.notifiers.markup import PLAIN, Dialect, Line, Mark, Marked, Mention, Span, own
from gpuwarden.notifiers.message import Notification

_WORDS: dict[str, dict[str, str]] = {
    "en": {
        "critical": "CRITICAL", "attention": "ATTENTION", "info": "INFO",
        "firing": "firing", "resolved": "resolved",
        "action": "Recommended action", "evidence": "Evidence", "since": "since", "ended": "ended",
        "evidence_resolved": "At resolution",
        "held": "held for", "slope": "slope", "baseline": "baseline", "window": "window",
        "count": "count", "digest": "Digest: {n} alerts held back by the rate limit or an outage, merged",
        "escalation": "Escalation level {n}",
        "test": "Test message from gpuwarden: this receiver works.", "alerts": "{f} firing, {r} resolved",
        "colon": ": ", "comma": ", ", "semicolon": "; ", "samples": " (n={n})",
    },
    "zh-CN": {
        "critical": "严重", "attention": "关注", "info": "信息",
        "firing": "告警中", "resolved": "已恢复",
        "action": "建议操作", "evidence": "证据", "since": "开始于", "ended": "结束于",
        "evidence_resolved": "恢复时",
        "held": "持续", "slope": "斜率", "baseline": "基线", "window": "窗口",
        "count": "次数", "digest": "汇总：因频率限制或故障暂存的 {n} 条告警合并发送",
        "escalation": "升级级别 {n}",
        "test": "gpuwarden 测试消息：此接收方工作正常。", "alerts": "{f} 条告警中，{r} 条已恢复",
        "colon": "：", "comma": "，", "semicolon": "；", "samples": "（{n} 个样本）",
    },
}

#: Evidence figures by what they measure, for readers of a translation (English shows the metric's name).
_METRICS: dict[str, dict[str, str]] = {
    "zh-CN": {
        "allocated": "已分配", "cap_clock_loss": "限频时钟损失", "capped": "限频占比",
        "capped_neighbours": "同节点限频 GPU 数", "ckpt_released": "检查点后已释放", "clock_frac": "SM 时钟比例",
        "clock_sm_max_mhz": "SM 最高时钟", "clock_sm_mhz": "SM 时钟", "comm_s": "通信耗时", "comm_share": "通信占比",
        "data_wait_s": "数据等待耗时", "data_wait_share": "数据等待占比", "ecc_uncorrected": "不可纠正 ECC 错误",
        "gpus": "GPU 数", "gpus_missing": "缺失 GPU 数", "gpus_present": "在位 GPU 数", "headroom_gib": "显存余量",
        "hw_slowdown": "硬件降速占比", "hw_thermal": "硬件过热降频占比", "idle_allocated": "已分配空闲占比",
        "idle_card_hours": "空闲卡时", "idle_hours": "空闲时长", "idle_s": "空闲时长（秒）", "mem_peak_frac": "显存峰值占比",
        "mem_total_gib": "显存总量", "mem_used_frac": "显存占用比例", "mem_used_gib": "显存占用", "nodes": "节点数",
        "power_brake": "功率刹车占比", "power_default_limit_w": "默认功率上限", "power_frac": "功率占上限比例",
        "power_limit_frac": "功率上限比例", "power_limit_w": "功率上限", "power_w": "功率", "present": "在位",
        "remap_failure": "行重映射失败", "remap_pending": "待重映射行", "step_time_s": "单步耗时",
        "sw_power_cap": "软件功率限频", "sw_thermal": "软件过热限频", "temp_gpu_c": "GPU 温度",
        "temp_per_w": "每瓦温升", "thermal_cap": "过热限频占比", "time_to_oom_s": "距显存耗尽",
        "util_gpu": "GPU 利用率", "version_skew": "版本不一致",
        "straggler": "拖慢作业", "clock_vs_peers": "SM 时钟与同作业节点之比", "clock_usual": "时钟比平时值",
        "tensor_vs_peers": "张量活跃度与同作业节点之比", "tensor_usual": "张量活跃度比平时值",
        "power_vs_peers": "功率与同作业节点之比", "peers_comm_share": "其他节点通信占比",
        "pcie_vs_peers": "PCIe 带宽与同作业节点之比", "pcie_gen": "PCIe 代数", "pcie_width": "PCIe 链路宽度",
        "peers_pcie_gen": "其他节点 PCIe 代数", "peers_pcie_width": "其他节点 PCIe 链路宽度",
        "pcie_link_frac": "PCIe 带宽占最大值比例",
        "step_time_rise": "单步耗时增幅", "tensor_active": "张量核心活跃度", "sm_active": "SM 活跃度",
        "nvlink_down": "NVLink 断开链路数",
    },
}
#: The suffix an aggregate adds to a metric's evidence key (``util_gpu_avg``), in words.
_AGGREGATES: dict[str, dict[str, str]] = {
    "zh-CN": {"avg": "均值", "max": "最大值", "min": "最小值", "start": "起始值", "range_rel": "相对波动"},
}
#: Duration units (seconds, minutes, hours, days) where a language writes them as words.
_DURATION_UNITS = {"zh-CN": ("秒", "分钟", "小时", "天")}

#: Alerts shown in full in one message; the rest are listed one line each.
DETAILED_ALERTS = 5


def words(language: str) -> dict[str, str]:
    return _WORDS.get(language, _WORDS["en"])


def top_tier(n: Notification) -> Tier:
    order = [Tier.INFO, Tier.ATTENTION, Tier.CRITICAL]
    firing = [a.tier for a in n.alerts if a.state == AlertState.FIRING] or [a.tier for a in n.alerts]
    return max(firing, key=order.index, default=Tier.INFO)


def is_resolved(n: Notification) -> bool:
    """All alerts of the notification are resolved."""
    return bool(n.alerts) and all(a.state == AlertState.RESOLVED for a in n.alerts)


@dataclass(frozen=True, slots=True)
class Locale:
    """Who reads a message: the language of its words and the zone its times are shown in."""

    language: str
    """``en`` or ``zh-CN`` (anything else reads as English)."""
    tz: tzinfo = UTC


def human_time(t: float, locale: Locale) -> str:
    """A time in the reader's zone, written the way people there write it."""
    d = datetime.fromtimestamp(t, locale.tz)
    if locale.language == "zh-CN":
        return f"{d.year}年{d.month}月{d.day}日 {d:%H:%M:%S} {d.tzname()}"
    return f"{d:%Y-%m-%d %H:%M:%S} {d.tzname()}"


def metric_words(key: str, language: str) -> str:
    """An evidence key (``hw_slowdown_avg``) in ``language``'s words; the key itself where it has none."""
    names, aggs = _METRICS.get(language, {}), _AGGREGATES.get(language, {})
    if key in names:
        return names[key]
    for agg, said in aggs.items():
        if key.endswith("_" + agg) and key[: -len(agg) - 1] in names:
            return names[key[: -len(agg) - 1]] + said
    return key


def _dur(s: float, language: str) -> str:
    """``15 min``, ``1 h 5 min`` (humantime's one style, as the alert summaries and the console
    say it; #33: the evidence said ``0m00s`` beside them); ``1 小时 5 分钟`` where the language has words."""
    return span(s, _DURATION_UNITS.get(language, UNITS))


def _num(v: float) -> str:
    return f"{v:.4g}"


def evidence_parts(ev: Evidence, w: dict[str, str], language: str = "en") -> list[str]:
    """The figures of an alert: ``mem_used_gib=61.5`` in English, named in words in a translation."""
    if language in _METRICS:
        parts = [f"{metric_words(k, language)} {_num(v)}" for k, v in ev.values.items()]
    else:
        parts = [f"{k}={_num(v)}" for k, v in ev.values.items()]
    if ev.held_for_s is not None:
        parts.append(f"{w['held']} {_dur(ev.held_for_s, language)}")
    if ev.slope is not None:
        parts.append(f"{w['slope']} {_num(ev.slope)}{(' ' + ev.slope_unit) if ev.slope_unit else ''}")
    if ev.window_s is not None:
        parts.append(f"{w['window']} {_dur(ev.window_s, language)}")
    if ev.baseline is not None:
        b = ev.baseline
        parts.append(f"{w['baseline']} {_num(b.median)} [{_num(b.low)}, {_num(b.high)}]" + w["samples"].format(n=b.samples))
    if ev.count is not None:
        parts.append(f"{w['count']} {ev.count}")
    if ev.note:
        parts.append(ev.note)
    return parts


def _fenced(note: str | None) -> str | None:
    """The lines of a note written as one fenced block (```` ```\n…``` ````), else None."""
    if note and note.startswith("```\n") and note.endswith("```") and note.count("```") == 2:
        return note[4:-3]
    return None


def _labels(a: AlertTransition) -> str:
    keys = ("node", "gpu", "user", "task", "project")
    return " · ".join(f"{k}={a.labels[k]}" for k in keys if a.labels.get(k))


def _ids(a: AlertTransition) -> list[Span | Marked]:
    return [Marked(Mark.CODE, (Span(a.rule),)), own(" · "), Marked(Mark.CODE, (Span(a.fingerprint[:16]),))]


def line_parts(a: AlertTransition, locale: Locale) -> Line:
    """One compact line per alert: used for digests and long groups."""
    w = words(locale.language)
    return [own(f"- [{w[a.state.value]}] "), Span(a.summary), own(" ("), Span(_labels(a) or a.rule), own(") "),
            Marked(Mark.CODE, (Span(a.fingerprint[:16]),))]


def block_parts(a: AlertTransition, locale: Locale) -> list[Line]:
    """An alert in full: summary, labels, evidence, when, and what to do."""
    w = words(locale.language)
    lines: list[Line] = [[Marked(Mark.BOLD, (own(f"[{w[a.tier.value]} · {w[a.state.value]}] "), Span(a.summary)))]]
    if lab := _labels(a):
        lines.append([Span(lab)])
    table = _fenced(a.evidence.note)
    evidence = a.evidence.model_copy(update={"note": None}) if table is not None else a.evidence
    if (ev := evidence_parts(evidence, w, locale.language)) or table is not None:
        said = w["evidence_resolved"] if a.state == AlertState.RESOLVED else w["evidence"]
        line: list[Span | Marked] = [own(said + w["colon"]), Span(w["semicolon"].join(ev))]
        if table is not None:  # lines kept: the usage digest's table
            line += [own(w["semicolon"]) if ev else own(""), Marked(Mark.BLOCK, (Span(table),))]
        lines.append(line)  # a resolve's figures are measured at resolution
    when = f"{w['since']} {human_time(a.started_at, locale)}"
    if a.ended_at is not None:
        when += f"{w['comma']}{w['ended']} {human_time(a.ended_at, locale)}"
    lines.append([own(when)])
    if a.action and a.state == AlertState.FIRING:
        lines.append([own(w["action"] + w["colon"]), Span(a.action)])
    lines.append(_ids(a))
    return lines


def alert_line(a: AlertTransition, locale: Locale, d: Dialect = PLAIN) -> str:
    return d.line(line_parts(a, locale))


def alert_block(a: AlertTransition, locale: Locale, d: Dialect = PLAIN) -> str:
    return d.lines(block_parts(a, locale))


def title_parts(n: Notification, locale: Locale) -> Line:
    w = words(locale.language)
    if n.reason == "test":
        return [own("gpuwarden test" if locale.language == "en" else "gpuwarden 测试")]
    tier = w[top_tier(n).value]
    firing = sum(a.state == AlertState.FIRING for a in n.alerts)
    if 0 < firing < len(n.alerts):  # a mixed message says what its body says: "3 firing, 2 resolved"
        state = w["alerts"].format(f=firing, r=len(n.alerts) - firing)
    else:
        state = w["resolved"] if is_resolved(n) else w["firing"]
    first = n.alerts[0].summary if n.alerts else n.group_key
    more = f" (+{len(n.alerts) - 1})" if len(n.alerts) > 1 else ""
    return [own(f"[{tier}] {state}{w['colon']}"), Span(first), own(more)]


def render_title(n: Notification, locale: Locale) -> str:
    """The title as plain text (Slack's ``plain_text`` header, Feishu's card title, an email subject)."""
    return PLAIN.line(title_parts(n, locale))


def intro_parts(n: Notification, locale: Locale) -> list[Line]:
    w = words(locale.language)
    firing = sum(a.state == AlertState.FIRING for a in n.alerts)
    parts = [w["alerts"].format(f=firing, r=len(n.alerts) - firing)]
    if n.reason == "digest":
        parts.insert(0, w["digest"].format(n=len(n.alerts)))
    if n.escalation_level:
        parts.append(w["escalation"].format(n=n.escalation_level))
    lines: list[Line] = [[own(p)] for p in parts]
    if n.mentions:  # on-call ids from the config: each channel writes its own mention of them
        line: list[Span | Mention] = [Mention(n.mentions[0])]
        for m in n.mentions[1:]:
            line += [own(" "), Mention(m)]
        lines.append(line)
    return lines


def render_text(n: Notification, locale: Locale, d: Dialect = PLAIN) -> tuple[str, str]:
    """(title, body) written in dialect ``d``, with the evidence and the recommended action of each alert."""
    title = d.line(title_parts(n, locale))
    if n.reason == "test":
        return title, d.line([own(words(locale.language)["test"])])
    sections = [d.lines(intro_parts(n, locale)), *(alert_block(a, locale, d) for a in n.alerts[:DETAILED_ALERTS])]
    if rest := n.alerts[DETAILED_ALERTS:]:
        sections.append(d.lines([line_parts(a, locale) for a in rest]))
    return title, (d.newline * 2).join(sections)


def truncate_utf8(text: str, max_bytes: int, marker: str = "\n…") -> str:
    """Cut ``text`` to at most ``max_bytes`` UTF-8 bytes without splitting a character."""
    data = text.encode()
    if len(data) <= max_bytes:
        return text
    room = max(0, max_bytes - len(marker.encode()))
    return data[:room].decode("utf-8", "ignore") + marker
