"""Message text as parts, and one writer per channel dialect that escapes every part from data.

Labels, task names, job names, summaries and annotations come from anyone who can name a
task or write a Prometheus rule. ``render`` therefore builds messages from :class:`Span`
parts and never writes markup itself: a :class:`Dialect` adds the few marks the product
uses (bold, code) and escapes the text of every span that is not marked ``own`` (the
product's fixed words), so nothing from data can become a mention, a link or emphasis.

Where a platform has a form that shows text as it is, data goes there: Slack's Block Kit takes
it in ``rich_text`` elements (:func:`rich_text`; mentions and links are elements of their own
types there, never text), and the text fallback is sent with ``mrkdwn`` off, where only Slack's
documented escapes ``&amp;`` ``&lt;`` ``&gt;`` apply. A Feishu card takes it in a ``plain_text``
div (:data:`TEXT`), the ``lark_md`` div holding only the configured ``<at>`` mentions. Email uses
HTML entities. The Markdown dialects of DingTalk and WeCom document no escape, so their syntax characters are written as
look-alikes that no parser reads as markup (``＜`` for ``<``, ``∗`` for ``*``, …), and line breaks
in data become spaces (a data line must not start a heading, quote or list).

A configured on-call id (:class:`Mention`) is a mention only where the channel's documented mechanism
takes an id of that form (Slack ``<@U…>``, DingTalk ``@mobile``, WeCom ``<@userid>``, Feishu
``<at id=…>``); any other id, and every id on a channel without one, is the text ``@id`` escaped like
data: an on-call override is typed by a person, so ``<!channel>`` or ``[x](https://…)`` there must not
become a broadcast or a link.

Apprise reaches services whose dialect we do not know, so its body is declared plain text:
Apprise escapes it for each target's format (CommonMark backslashes, HTML entities, Slack's
``&amp;``). Mentions and CommonMark autolinks (``<https://…>``) are no part of those escapes, so a
data ``@`` or ``<`` that would open one gets a zero-width space after it (discord.py's
``escape_mentions`` does the same): the text reads and shows as it was.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum


class Mark(Enum):
    BOLD = "bold"
    CODE = "code"
    BLOCK = "block"
    """Preformatted lines (the usage digest's table): data keeps its line breaks, never its markup."""


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of message text; ``own`` only for the product's fixed words, never for data."""

    text: str
    own: bool = False


@dataclass(frozen=True, slots=True)
class Marked:
    """Spans under one of the product's marks (a bold headline, a code-styled rule name)."""

    mark: Mark
    parts: tuple[Span, ...]


@dataclass(frozen=True, slots=True)
class Mention:
    """A configured id to mention (an on-call from ``notify.schedules``), never data: each channel writes
    its own mention of it."""

    id: str


def own(text: str) -> Span:
    return Span(text, own=True)


Line = Sequence[Span | Marked | Mention]


_BREAKS = {"\n": " ", "\r": " ", "\u2028": " ", "\u2029": " "}
_ONE_LINE = str.maketrans(_BREAKS)
#: Slack's documented escapes for its control characters (docs.slack.dev, "Formatting text for app surfaces").
_SLACK = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})
#: Markdown (DingTalk, WeCom): tags/mentions, links, emphasis, code, escapes, @-mentions.
_MARKDOWN = str.maketrans({"<": "＜", ">": "＞", "&": "＆", "[": "［", "]": "］", "*": "∗", "_": "ˍ",
                    "~": "∼", "`": "ˋ", "\\": "∖", "@": "＠", **_BREAKS})
#: Inside a fenced block only the fence, tags and @-mentions can act.
_MARKDOWN_BLOCK = str.maketrans({"<": "＜", ">": "＞", "&": "＆", "`": "ˋ", "@": "＠"})


def slack_text(text: str) -> str:
    """Data in Slack's text with ``mrkdwn`` off: ``&<>`` as the entities Slack's formatting reference asks
    for, which Slack shows as the characters; every other character as it is."""
    return text.translate(_SLACK)


def markdown_text(text: str) -> str:
    """Data for the Markdown dialects of DingTalk and WeCom: no syntax character left."""
    return text.translate(_MARKDOWN)


def markdown_block(text: str) -> str:
    return text.translate(_MARKDOWN_BLOCK)


def html_text(text: str) -> str:
    return html.escape(text, quote=True)


#: An ``@`` or ``<`` that could open a mention (``@all``, ``<@U1>``, ``<!channel>``) or an autolink.
_OPENER = re.compile(r"(?<![\w.+-])@(?=[\w!&#^+-])|<(?=[\w@!#/])")


def unopened(text: str) -> str:
    """Data for a target of unknown dialect (Apprise): a zero-width space after each mention or link opener."""
    return _OPENER.sub(lambda m: m.group() + "\u200b", text)


def apprise_text(text: str) -> str:
    """Data on a line of Apprise's plain text: its line breaks as spaces, no opener left."""
    return unopened(text.translate(_ONE_LINE))


#: Slack's ids (docs.slack.dev, "Formatting text for app surfaces", Block Kit's rich text elements): a member
#: (``U…``, ``W…`` on Enterprise Grid) is mentioned by ``<@U…>`` or a ``user`` element, a user group (``S…``)
#: by ``<!subteam^S…>`` or a ``usergroup`` element; an ``@name`` in text mentions no one.
_SLACK_IDS = {"user": re.compile(r"[UW][A-Z0-9]{8,}"), "usergroup": re.compile(r"S[A-Z0-9]{8,}")}


def slack_id_kind(id: str) -> str | None:
    """``user`` for a Slack member id, ``usergroup`` for a user group's, None for anything else."""
    return next((kind for kind, form in _SLACK_IDS.items() if form.fullmatch(id)), None)


#: DingTalk's custom robot notifies a number in ``at.atMobiles`` that is written ``@mobile`` in the text
#: (open.dingtalk.com, custom robot: "在text内容里要有@人的手机号"): digits, an optional ``+`` and hyphens.
_DINGTALK_MOBILE = re.compile(r"\+?[0-9][0-9-]{3,18}[0-9]")
#: WeCom's group robot markdown mentions a member by ``<@userid>`` (群机器人配置说明); a userid is 1-64
#: letters, digits and ``_-@.``, the first a letter or digit (通讯录管理, 创建成员).
_WECOM_USERID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
#: Feishu's card Markdown mentions by ``<at id=…></at>`` with an open_id, user_id or union_id (``ou_…``);
#: ``id=all`` is everyone, which only ``at_all_on_critical`` asks for.
_FEISHU_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def is_dingtalk_mobile(id: str) -> bool:
    return _DINGTALK_MOBILE.fullmatch(id) is not None


def dingtalk_mention(id: str) -> str:
    """A configured id in DingTalk's markdown: ``@mobile`` for a mobile number (it goes to ``atMobiles`` too),
    anything else as escaped text."""
    return "@" + id if is_dingtalk_mobile(id) else markdown_text("@" + id)


def wecom_mention(id: str) -> str:
    """A configured id in WeCom's markdown: ``<@userid>`` for a userid, anything else as escaped text."""
    return f"<@{id}>" if _WECOM_USERID.fullmatch(id) else markdown_text("@" + id)


def feishu_mention(id: str) -> str:
    """A configured id in Feishu's card Markdown: ``<at id=…></at>`` for an open_id/user_id, else nothing (the
    ``plain_text`` body shows it as text)."""
    return f"<at id={id}></at>" if _FEISHU_ID.fullmatch(id) and id != "all" else ""


def slack_mention(id: str) -> str:
    """A configured id in Slack's text: a real mention of a member or user group; anything else as text."""
    kind = slack_id_kind(id)
    if kind is None:
        return "@" + slack_text(id)
    return f"<@{id}>" if kind == "user" else f"<!subteam^{id}>"


def plain_text(text: str) -> str:
    """Plain text (email's text part, PagerDuty details, Feishu's ``plain_text``): nothing reads it as markup."""
    return text


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one channel writes text: the escaper for data in a line and in a block, its bold, code
    and block marks, its line break, and its mention of a configured id (None: the channel has no
    mention mechanism, so ``@id`` is escaped as data)."""

    escape: Callable[[str], str]
    escape_block: Callable[[str], str]
    bold: tuple[str, str]
    code: tuple[str, str]
    block: tuple[str, str] = ("```\n", "```")
    newline: str = "\n"
    mention: Callable[[str], str] | None = None

    def span(self, s: Span | Marked | Mention) -> str:
        if isinstance(s, Span):
            return s.text if s.own else self.escape(s.text)
        if isinstance(s, Mention):
            return self.mention(s.id) if self.mention else self.escape("@" + s.id)
        if s.mark is Mark.BOLD:
            return self.bold[0] + "".join(self.span(p) for p in s.parts) + self.bold[1]
        # Code and blocks show their text as it is: only what could end them or mention is escaped.
        text = "".join(p.text if p.own else self.escape_block(p.text) for p in s.parts)
        if s.mark is Mark.CODE:
            return self.code[0] + " ".join(text.splitlines()) + self.code[1]
        return self.block[0] + text + self.block[1]

    def line(self, spans: Line) -> str:
        return "".join(self.span(s) for s in spans)

    def lines(self, lines: Sequence[Line]) -> str:
        return self.newline.join(self.line(x) for x in lines)


PLAIN = Dialect(plain_text, plain_text, ("**", "**"), ("`", "`"))
#: Slack's text fallback, sent with ``mrkdwn`` off: marks would show as characters, so there are none.
SLACK = Dialect(slack_text, slack_text, ("", ""), ("", ""), ("\n", ""), mention=slack_mention)
#: Text a platform shows as it is (Feishu's ``plain_text``): nothing escaped, no marks (they would show).
TEXT = Dialect(plain_text, plain_text, ("", ""), ("", ""), ("\n", ""))
DINGTALK = Dialect(markdown_text, markdown_block, ("**", "**"), ("`", "`"), mention=dingtalk_mention)
WECOM = Dialect(markdown_text, markdown_block, ("**", "**"), ("`", "`"), mention=wecom_mention)
#: Apprise's declared plain text: no marks (they would show as characters), the table on lines of its own.
APPRISE = Dialect(apprise_text, unopened, ("", ""), ("", ""), ("\n", ""))
HTML = Dialect(html_text, html_text, ("<b>", "</b>"), ("<code>", "</code>"), ("<pre>", "</pre>"), "<br>\n")


def rich_text(lines: Sequence[Line]) -> list[dict]:
    """Slack ``rich_text`` objects for ``lines``. Each span is a ``text`` element, which Slack shows as it
    is: no mrkdwn, and mentions, links and channels are elements of their own types, never text. Bold and
    code are the element's style, a block is ``rich_text_preformatted`` (its lines kept); a configured
    :class:`Mention` of a Slack member or user group is a ``user`` or ``usergroup`` element."""
    out: list[dict] = []
    section: list[dict] = []

    def text(t: str, style: dict | None = None) -> None:
        if t:
            section.append({"type": "text", "text": t, **({"style": style} if style else {})})

    def flush() -> None:
        if section:
            out.append({"type": "rich_text_section", "elements": section.copy()})
            section.clear()

    for i, line in enumerate(lines):
        if i and section:
            text("\n")
        for s in line:
            if isinstance(s, Span):
                text(s.text)
            elif isinstance(s, Mention):
                kind = slack_id_kind(s.id)
                if kind is None:
                    text("@" + s.id)
                else:
                    section.append({"type": kind, f"{kind}_id": s.id})
            elif s.mark is Mark.BLOCK:
                flush()
                out.append({"type": "rich_text_preformatted",
                            "elements": [{"type": "text", "text": "".join(p.text for p in s.parts)}]})
            elif s.mark is Mark.BOLD:
                for p in s.parts:
                    text(p.text, {"bold": True})
            else:
                text(" ".join("".join(p.text for p in s.parts).splitlines()), {"code": True})
    flush()
    return out
