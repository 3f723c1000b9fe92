"""How each platform reads the markup in a message, written from its formatting documentation.

Not the code's reading: each reader lists what its platform's document says turns text into a
mention, a link or emphasis, and what it shows. The tests compare a message whose data is
hostile with the same message built from harmless data: the product's own marks are in both.

* Slack: "Formatting text for app surfaces" (docs.slack.dev/messaging/formatting-message-text):
  ``&``, ``<``, ``>`` are control characters and must be sent as ``&amp;`` ``&lt;`` ``&gt;``;
  ``<!here>``, ``<!channel>``, ``<!everyone>``, ``<@U…>``, ``<!subteam^…>`` mention, ``<#C…>``
  links a channel, ``<url|text>`` and ``<url>`` link; ``*bold*``, ``_italic_``, ``~strike~``,
  `` `code` `` style, unless the message says ``"mrkdwn": false`` (chat.postMessage: "Disable Slack
  markup parsing by setting to false"), where ``&<>`` stay control characters; ``plain_text`` objects
  are shown as they are.
* Slack rich text (docs.slack.dev/reference/block-kit/blocks/rich-text-block and its element pages): a
  ``text`` element shows its text; ``style`` bold/italic/strike/code/underline styles it;
  ``rich_text_preformatted``, ``_quote`` and ``_list`` are formatting; ``user``, ``usergroup``,
  ``broadcast``, ``channel`` and ``team`` elements mention, ``link`` links.
* Feishu card ``lark_md`` (open.feishu.cn, message card "Markdown" / text component): ``**bold**``,
  ``*italic*``, ``~~strike~~``, ``[text](url)`` links, ``<at id=…></at>`` / ``<at user_id="all">``
  mentions, ``<font>`` colour tags. A text component's ``plain_text`` is "普通文本内容": shown as it is.
* DingTalk custom robot markdown (open.dingtalk.com custom-robot-access): headings, ``> quote``,
  ``**bold**``, ``*italic*``, ``[text](url)``, ``![](img)``, lists; ``@mobile`` in the text is a
  mention of a number in ``atMobiles``.
* CommonMark (spec.commonmark.org, read by markdown-it-py, its reference port): what Apprise's
  Markdown targets receive; links, autolinks, images, emphasis, code, raw HTML, headings, quotes, lists.
* Chat mentions in text whatever the markup: ``@all``/``@channel``/``@here``/``@user`` (Mattermost,
  Rocket.Chat), ``@everyone``/``<@id>`` (Discord), ``<!channel>``/``<@U…>`` (Slack).
* WeCom group robot markdown (developer.work.weixin.qq.com, 群机器人配置说明): ``**bold**``,
  ``[text](url)``, `` `code` ``, ``> quote``, ``<font color=…>``, and ``<@userid>`` mentions.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass, field
from html.parser import HTMLParser

from markdown_it import MarkdownIt  # rich's dependency


@dataclass
class Reading:
    mentions: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    emphasis: list[str] = field(default_factory=list)
    visible: str = ""


_SLACK_CONTROL = re.compile(r"<([^<>]*)>")
_SLACK_STYLE = re.compile(r"(?<![\w*_~`])([*_~`])(?=\S)([^\n]*?\S)\1(?![\w])")


def slack_mrkdwn(text: str, mrkdwn: bool = True) -> Reading:
    r = Reading()
    for m in _SLACK_CONTROL.finditer(text):
        inner = m.group(1)
        (r.mentions if inner[:1] in "!@#" else r.links).append(inner)
    r.emphasis = [m.group(0) for m in _SLACK_STYLE.finditer(text)] if mrkdwn else []
    shown = _SLACK_CONTROL.sub(lambda m: m.group(1).split("|")[-1], text)
    r.visible = shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return r


_SLACK_MENTIONS = ("user", "usergroup", "broadcast", "channel", "team")
_SLACK_CONTAINERS = ("rich_text_preformatted", "rich_text_quote", "rich_text_list")


def slack_blocks(blocks: list[dict]) -> Reading:
    """What Slack shows of Block Kit blocks: ``plain_text`` objects and rich text; mrkdwn objects as mrkdwn."""
    r = Reading()
    shown: list[str] = []

    def element(el: dict) -> None:
        kind = el.get("type")
        if kind in _SLACK_MENTIONS:
            r.mentions.append(str(el))
        elif kind == "link":
            r.links.append(el.get("url", ""))
        elif kind == "text":
            shown.append(el["text"])
            r.emphasis += [f"{k}:{el['text']}" for k, on in el.get("style", {}).items() if on]
        elif kind == "plain_text":
            shown.append(el["text"] + "\n")
        elif kind == "mrkdwn":
            read = slack_mrkdwn(el["text"])
            r.mentions += read.mentions
            r.links += read.links
            r.emphasis += read.emphasis
            shown.append(read.visible + "\n")
        else:
            if kind in _SLACK_CONTAINERS:
                r.emphasis.append(kind)
            for child in [el["text"]] if isinstance(el.get("text"), dict) else el.get("elements", []):
                element(child)
            shown.append("\n")

    for block in blocks:
        element(block)
    r.visible = "".join(shown)
    return r


_MD_LINK = re.compile(r"!?\[([^\]\n]*)\]\(([^)\n]*)\)")
_MD_TAG = re.compile(r"<\s*(/?\s*[A-Za-z@!][^<>]*)>")
_MD_STYLE = re.compile(r"(\*\*|__|~~|\*|_|`)(?=\S)([^\n]*?\S)\1")
_DINGTALK_AT = re.compile(r"@(all|\+?\d{5,})\b")


def markdown(text: str, platform: str) -> Reading:
    """Feishu ``lark_md``, DingTalk and WeCom markdown: tags (mentions, fonts), links, emphasis."""
    r = Reading()
    for m in _MD_TAG.finditer(text):
        tag = m.group(1)
        if tag.startswith("/"):
            continue  # a closing tag: its opening one was counted
        (r.mentions if tag.startswith(("at", "@")) else r.emphasis).append(tag)
    r.links = [m.group(2) for m in _MD_LINK.finditer(text)]
    r.emphasis += [m.group(0) for m in _MD_STYLE.finditer(text)]
    if platform == "dingtalk":
        r.mentions += _DINGTALK_AT.findall(text)
    r.visible = text
    return r


_CHAT_MENTION = re.compile(r"(?<![\w.+-])@[\w!&#^+-]+|<[@!#][^<>\s]*")


def chat_mentions(text: str) -> list[str]:
    return _CHAT_MENTION.findall(text)


#: CommonMark tokens that are plain prose; every other token is markup.
_PROSE = {"paragraph_open", "paragraph_close", "inline", "text", "softbreak", "hardbreak"}


def commonmark(text: str) -> Reading:
    """A CommonMark document as a CommonMark renderer reads it (markdown-it-py, ``commonmark`` preset)."""
    r = Reading()
    shown: list[str] = []
    tokens = MarkdownIt("commonmark").parse(text)
    for t in [c for t in tokens for c in (t.children or [t])]:
        if t.type in ("link_open", "image"):
            r.links.append(str(t.attrGet("href") or t.attrGet("src")))
        elif t.type not in _PROSE and not t.type.endswith("_close"):
            r.emphasis.append(t.type)
        breaks = t.type in ("softbreak", "hardbreak", "paragraph_close")
        shown.append("\n" if breaks else t.content if t.type in ("text", "code_inline") else "")
    r.visible = "".join(shown)
    r.mentions = chat_mentions(r.visible)
    return r


def feishu_card(card: dict) -> Reading:
    """A card's header and div texts: ``plain_text`` shown as it is, ``lark_md`` read as Markdown."""
    r = Reading()
    shown = [card["header"]["title"]["content"]] if card["header"]["title"]["tag"] == "plain_text" else []
    for el in card["elements"]:
        text = el["text"]
        if text["tag"] == "plain_text":
            shown.append(text["content"])
            continue
        read = markdown(text["content"], "feishu")
        r.mentions += read.mentions
        r.links += read.links
        r.emphasis += read.emphasis
        shown.append(read.visible)
    r.visible = "\n".join(shown)
    return r


class _Html(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.hrefs: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.hrefs += [v or "" for k, v in attrs if k in ("href", "src")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def html_body(text: str) -> Reading:
    p = _Html()
    p.feed(text)
    return Reading(links=p.hrefs, emphasis=p.tags, visible=html.unescape("".join(p.text)))


#: Look-alikes a channel may show for a syntax character it cannot escape: the reader still sees the text.
_LOOKALIKE = str.maketrans({"∗": "*", "ˍ": "_", "∼": "~", "ˋ": "`", "∖": "\\", "\u200b": ""})


def readable(text: str) -> str:
    """``text`` as a reader reads it: full-width forms and look-alikes as the ASCII they stand for,
    zero-width spaces unseen, line breaks and runs of spaces as one space."""
    folded = unicodedata.normalize("NFKC", text).translate(_LOOKALIKE)
    return re.sub(r"\s+", " ", folded)
