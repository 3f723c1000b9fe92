"""Message text in English or Simplified Chinese, shared by every channel.

Channels wrap this text in their own envelope (Block Kit, Feishu card, DingTalk
markdown, …); the words, the evidence and the recommended action are decided
once here so every platform tells the same story.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo

from gpuwarden.contract import AlertState, AlertTransition, Evidence, Tier
from gpuwarden.notifiers.markup import PLAIN, Dialect, Line, Mark, Marked, Span, own
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
    },
}

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


def _dur(s: float) -> str:
    s = int(s)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _num(v: float) -> str:
    return f"{v:.4g}"


def evidence_parts(ev: Evidence, w: dict[str, str]) -> list[str]:
    parts = [f"{k}={_num(v)}" for k, v in ev.values.items()]
    if ev.held_for_s is not None:
        parts.append(f"{w['held']} {_dur(ev.held_for_s)}")
    if ev.slope is not None:
        parts.append(f"{w['slope']} {_num(ev.slope)}{(' ' + ev.slope_unit) if ev.slope_unit else ''}")
    if ev.window_s is not None:
        parts.append(f"{w['window']} {_dur(ev.window_s)}")
    if ev.baseline is not None:
        b = ev.baseline
        parts.append(f"{w['baseline']} {_num(b.median)} [{_num(b.low)}, {_num(b.high)}] (n={b.samples})")
    if ev.count is not None:
        parts.append(f"{w['count']} {ev.count}")
    if ev.note:
        parts.append(ev.note)
    return parts


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
    if ev := evidence_parts(a.evidence, w):
        said = w["evidence_resolved"] if a.state == AlertState.RESOLVED else w["evidence"]
        lines.append([own(f"{said}: "), Span("; ".join(ev))])  # a resolve's figures are measured at resolution
    when = f"{w['since']} {human_time(a.started_at, locale)}"
    if a.ended_at is not None:
        when += f", {w['ended']} {human_time(a.ended_at, locale)}"
    lines.append([own(when)])
    if a.action and a.state == AlertState.FIRING:
        lines.append([own(f"{w['action']}: "), Span(a.action)])
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
    return [own(f"[{tier}] {state}: "), Span(first), own(more)]


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
    if n.mentions:  # on-call ids from the config
        parts.append(" ".join(f"@{m}" for m in n.mentions))
    return [[own(p)] for p in parts]


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
