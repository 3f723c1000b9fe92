"""Text from data never becomes a mention, a link or emphasis, on any channel, through the real send path.

Each channel posts to a local server (tests/fakes); what arrives is read the way its platform's
formatting documentation says it is read (tests/fakes/readers.py cites the documents). A message
built from hostile labels, summary, action and evidence is compared with the same message built
from harmless data: the product's own marks are in both, nothing else may be.
"""

from __future__ import annotations

import json
import re

import pytest
from email.message import Message

from gpuwarden.contract import AlertTransition, Evidence
from gpuwarden.notifiers import slack
from gpuwarden.notifiers.delivery import Delivery
from gpuwarden.notifiers.message import Notification
from gpuwarden.notifiers.receivers import Receiver
from gpuwarden.notifiers.render import Locale
from tests.fakes import readers
from tests.fakes.alerts import T0, alert
from tests.fakes.http import FakeAppriseJson, FakeDingTalk, FakeFeishu, FakeSlack, FakeWebhook, FakeWeCom, Received
from tests.fakes.smtp import FakeSmtp

LABELS = {
    "task": "<!channel> eval <https://evil.example|click>",  # the task name
    "user": '@all <at user_id="all"></at> <@U123> @13800001111',
    "node": "node-1 <!here> <#C024BE7LR>",
    "project": "[docs](https://evil.example) *bold* _it_ ~gone~ `code` ![](https://evil.example/p.png)",
}
SUMMARY = "loss *spiked* <b>a < b & c > d</b> [t](https://evil.example) ~~x~~ **y** <font color=red>z</font>"
ACTION = "run <https://evil.example|this> then @all\n# heading\n> quote"
NOTE = "<!everyone> **x** https://evil.example/bare"
HOSTILE = [*LABELS.values(), SUMMARY, ACTION, NOTE]


def harmless(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9 ]", "x", text)


def transition(clean: bool) -> AlertTransition:
    f = harmless if clean else str
    base = alert(1)
    return base.model_copy(update={
        "labels": {**base.labels, **{k: f(v) for k, v in LABELS.items()}},
        "summary": f(SUMMARY), "action": f(ACTION),
        "evidence": Evidence(values={"mem_used_gib": 61.5}, held_for_s=900, note=f(NOTE)),
    })


def notification(receiver: str, clean: bool, mentions: tuple[str, ...] = ()) -> Notification:
    return Notification(receiver=receiver, group_key="g1", alerts=[transition(clean)], reason="new", at=T0,
                        id=f"n-{receiver}-{clean}", mentions=list(mentions))


async def send_both(receiver: Receiver, clock, spool, mentions: tuple[str, ...] = (),
                    clean_mentions: tuple[str, ...] | None = None) -> None:
    """The hostile message and its harmless twin; ``mentions``: the on-call ids the config names (the twin's
    ``clean_mentions``, the same unless given)."""
    d = Delivery([receiver], spool=spool, clock=clock, sleep=clock.sleep)
    try:
        for clean in (False, True):
            who = mentions if not clean or clean_mentions is None else clean_mentions
            assert (await d.deliver(notification(receiver.name, clean, who))).status == "delivered"
            await clock.sleep(120)  # apart, within every platform's rate limit
    finally:
        await d.aclose()


def assert_only_own_marks(hostile: readers.Reading, clean: readers.Reading,
                          mentions: list[str] | None = None) -> None:
    assert hostile.mentions == (mentions or []) and hostile.links == []
    assert len(hostile.emphasis) == len(clean.emphasis), hostile.emphasis
    shown = readers.readable(hostile.visible)
    for text in HOSTILE:
        assert readers.readable(text) in shown, text  # still there to read, only inert


def accepted_json(fake) -> tuple[dict, dict]:
    hostile, clean = fake.accepted
    assert isinstance(hostile, Received)
    return hostile.json, clean.json


async def test_slack_text_and_blocks_show_data_exactly_but_never_mention_link_or_style(monkeypatch, clock, spool):
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SL_URL", fake.base + fake.path)
        await send_both(Receiver(name="sl", slack={"url": {"env": "SL_URL"}}), clock, spool)
    hostile, clean = accepted_json(fake)
    assert hostile["mrkdwn"] is False  # the fallback is not read as mrkdwn
    text = readers.slack_mrkdwn(hostile["text"], mrkdwn=False)
    assert_only_own_marks(text, readers.slack_mrkdwn(clean["text"], mrkdwn=False))
    blocks = readers.slack_blocks(hostile["blocks"])
    assert_only_own_marks(blocks, readers.slack_blocks(clean["blocks"]))
    for data in HOSTILE:  # every character as it was, nothing swapped for a look-alike: a user can copy and grep it
        assert data in text.visible and data in blocks.visible, data
    header = hostile["blocks"][0]["text"]
    assert header["type"] == "plain_text" and SUMMARY.replace("\n", " ")[:40] in header["text"]


#: A member and a user group as Slack's docs write them (docs.slack.dev: the user element's "U1234ABCD",
#: "Formatting text for app surfaces": ``<@U0G9QF9C6>``, ``<!subteam^SAZ94GDB8>``).
SLACK_ONCALL = ("U0G9QF9C6", "SAZ94GDB8")


async def test_slack_configured_on_call_is_a_real_mention_and_the_only_one(monkeypatch, clock, spool):
    """Slack mentions by id only: in rich text a ``user`` element (``user_id``) or ``usergroup`` element
    (``usergroup_id``), in text ``<@U…>`` or ``<!subteam^S…>``; ``@U0G9QF9C6`` as text mentions no one."""
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SL_URL", fake.base + fake.path)
        await send_both(Receiver(name="sl", slack={"url": {"env": "SL_URL"}}), clock, spool, SLACK_ONCALL)
    hostile, clean = accepted_json(fake)
    text = readers.slack_mrkdwn(hostile["text"], mrkdwn=False)
    assert_only_own_marks(text, readers.slack_mrkdwn(clean["text"], mrkdwn=False),
                          mentions=["@U0G9QF9C6", "!subteam^SAZ94GDB8"])
    blocks = readers.slack_blocks(hostile["blocks"])
    assert_only_own_marks(blocks, readers.slack_blocks(clean["blocks"]), mentions=[
        str({"type": "user", "user_id": "U0G9QF9C6"}), str({"type": "usergroup", "usergroup_id": "SAZ94GDB8"})])
    for data in HOSTILE:
        assert data in text.visible and data in blocks.visible, data


async def test_slack_never_mentions_an_on_call_that_is_not_a_slack_id(monkeypatch, clock, spool):
    """An on-call override from the control state is not checked at load: what is not a member or user
    group id is shown as text, whatever it holds."""
    odd = ("ann", "<!channel>", "U0G9QF9C6> <!here")
    with FakeSlack(clock) as fake:
        monkeypatch.setenv("SL_URL", fake.base + fake.path)
        await send_both(Receiver(name="sl", slack={"url": {"env": "SL_URL"}}), clock, spool, odd)
    hostile, clean = accepted_json(fake)
    text = readers.slack_mrkdwn(hostile["text"], mrkdwn=False)
    blocks = readers.slack_blocks(hostile["blocks"])
    assert_only_own_marks(text, readers.slack_mrkdwn(clean["text"], mrkdwn=False))
    assert_only_own_marks(blocks, readers.slack_blocks(clean["blocks"]))
    for who in odd:
        assert f"@{who}" in text.visible and f"@{who}" in blocks.visible, who


#: On-call overrides as a person may type them into the control state (OnCallOverride records): each
#: channel's syntax, none an id in any platform's form.
ODD_ONCALL = ("<!channel>", "[x](https://evil.example)", "**bold**", "<script>alert(1)</script>", "@all",
              "a> <@all")

#: platform → (an on-call id in the form its docs give, the mentions its reader may find with ODD_ONCALL beside it):
#: DingTalk "@mobile" in the text for a number in at.atMobiles (custom robot docs; the DingTalk SDKs' 15212345678),
#: WeCom markdown "<@userid>" (群机器人配置说明; userid "zhangsan" as in 创建成员), Feishu card "<at id=ou_…>";
#: email and Apprise have no mention of their own: "@ann" there is text.
ONCALL = {
    "dingtalk": ("15212345678", ["15212345678"]),
    "wecom": ("zhangsan", ["@zhangsan"]),
    "feishu": ("ou_c99c5f35d542efc7ee492afe11af19ef", ["at id=ou_c99c5f35d542efc7ee492afe11af19ef"]),
    "email": ("ann", []),
    "apprise-markdown": ("ann", []),
    "apprise-text": ("ann", []),
}


async def on_call_readings(platform: str, monkeypatch, clock, spool,
                           mentions: tuple[str, ...]) -> tuple[readers.Reading, readers.Reading, dict]:
    """The message naming ``mentions`` and its twin (harmless data, the first id only), read as ``platform``
    reads them, and the hostile message's JSON (empty for email)."""
    both = {"mentions": mentions, "clean_mentions": mentions[:1]}
    if platform == "email":
        with FakeSmtp() as smtp:
            r = Receiver(name="mail", email={"to": ["oncall@example.org"], "from": "gpuwarden@example.org",
                                             "host": "127.0.0.1", "port": smtp.port})
            await send_both(r, clock, spool, **both)
        hostile, clean = (readers.html_body(part(m, "text/html")) for m in smtp.messages)
        return hostile, clean, {}
    if platform.startswith("apprise"):
        fmt = platform.removeprefix("apprise-")
        with FakeAppriseJson(clock) as fake:
            monkeypatch.setenv("AP_URL", f"{fake.url()}?format={fmt}")
            await send_both(Receiver(name="ap", apprise={"url": {"env": "AP_URL"}}), clock, spool, **both)
        h, c = accepted_json(fake)
        read = APPRISE_READERS[fmt]
        return read(h["message"]), read(c["message"]), h
    if platform == "feishu":
        with FakeFeishu(clock) as fake:
            monkeypatch.setenv("FS_URL", fake.base + fake.hook)
            await send_both(Receiver(name="fs", feishu={"url": {"env": "FS_URL"}}), clock, spool, **both)
        h, c = accepted_json(fake)
        return readers.feishu_card(h["card"]), readers.feishu_card(c["card"]), h
    fake_type, url_of, text_of = MARKDOWN_CHANNELS[platform]
    with fake_type(clock) as fake:
        monkeypatch.setenv("MD_URL", url_of(fake))
        await send_both(Receiver(name="md", **{platform: {"url": {"env": "MD_URL"}}}), clock, spool, **both)
    h, c = accepted_json(fake)
    return readers.markdown(text_of(h), platform), readers.markdown(text_of(c), platform), h


@pytest.mark.parametrize("platform", ONCALL)
async def test_an_on_call_id_mentions_only_through_the_channels_own_mechanism(platform, monkeypatch, clock, spool):
    """An on-call override is not checked at load: an id in the channel's documented form is its mention, any
    other id is shown as ``@id`` text, never a mention, link, tag or emphasis."""
    valid, expected = ONCALL[platform]
    hostile, clean, body = await on_call_readings(platform, monkeypatch, clock, spool, (valid, *ODD_ONCALL))
    assert_only_own_marks(hostile, clean, mentions=expected)
    if platform.startswith("apprise"):
        assert readers.chat_mentions(hostile.visible) == []
    if platform == "dingtalk":
        assert body["at"]["atMobiles"] == [valid]  # DingTalk notifies only these
    shown = readers.readable(hostile.visible)
    for who in (valid, *ODD_ONCALL):
        assert readers.readable(f"@{who}") in shown, who


async def test_feishu_shows_data_exactly_and_configured_mentions_are_the_only_ones(monkeypatch, clock, spool):
    with FakeFeishu(clock) as fake:
        monkeypatch.setenv("FS_URL", fake.base + fake.hook)
        r = Receiver(name="fs", feishu={"url": {"env": "FS_URL"}, "at_user_ids": ["ou_oncall"]})
        await send_both(r, clock, spool)
    hostile, clean = accepted_json(fake)
    read = readers.feishu_card(hostile["card"])
    assert_only_own_marks(read, readers.feishu_card(clean["card"]), mentions=["at id=ou_oncall"])
    for data in HOSTILE:  # every character as it was: a user can copy and grep it
        assert data in read.visible, data


#: platform → (fake, its webhook URL, the markdown text in what it accepted)
MARKDOWN_CHANNELS = {
    "dingtalk": (FakeDingTalk, lambda f: f"{f.base}/robot/send?access_token={f.token}",
                 lambda body: body["markdown"]["text"]),
    "wecom": (FakeWeCom, lambda f: f"{f.base}/cgi-bin/webhook/send?key={f.key}",
              lambda body: body["markdown"]["content"]),
}


@pytest.mark.parametrize("platform", MARKDOWN_CHANNELS)
async def test_markdown_channels_show_data_but_never_mention_link_or_style(platform, monkeypatch, clock, spool):
    fake_type, url_of, text_of = MARKDOWN_CHANNELS[platform]
    with fake_type(clock) as fake:
        monkeypatch.setenv("MD_URL", url_of(fake))
        await send_both(Receiver(name="md", **{platform: {"url": {"env": "MD_URL"}}}), clock, spool)
    hostile, clean = accepted_json(fake)
    assert_only_own_marks(readers.markdown(text_of(hostile), platform), readers.markdown(text_of(clean), platform))
    if platform == "dingtalk":
        assert hostile["at"] == {"atMobiles": [], "atUserIds": [], "isAtAll": False}


def part(msg: Message, content_type: str) -> str:
    (p,) = [p for p in msg.walk() if p.get_content_type() == content_type]
    return p.get_payload(decode=True).decode(p.get_content_charset() or "utf-8")


async def test_email_html_escapes_data_and_text_part_keeps_it_verbatim(clock, spool):
    with FakeSmtp() as smtp:
        r = Receiver(name="mail", email={"to": ["oncall@example.org"], "from": "gpuwarden@example.org",
                                         "host": "127.0.0.1", "port": smtp.port})
        await send_both(r, clock, spool)
    hostile, clean = smtp.messages
    read, base = readers.html_body(part(hostile, "text/html")), readers.html_body(part(clean, "text/html"))
    assert read.links == [] and read.emphasis == base.emphasis  # the same tags: only the product's own
    plain = part(hostile, "text/plain").replace("\r\n", "\n")  # SMTP sends CRLF line ends
    for text in HOSTILE:
        assert text in read.visible.replace("\r\n", "\n") and text in plain  # every character kept


async def test_generic_webhook_json_carries_data_untouched(monkeypatch, clock, spool):
    with FakeWebhook(clock) as fake:
        monkeypatch.setenv("WH_URL", fake.base + "/hook")
        await send_both(Receiver(name="wh", webhook={"url": {"env": "WH_URL"}}), clock, spool)
    hostile, _ = accepted_json(fake)
    (a,) = hostile["alerts"]
    assert {k: a["labels"][k] for k in LABELS} == LABELS
    assert a["annotations"]["summary"] == SUMMARY and a["annotations"]["action"] == ACTION
    assert NOTE in a["annotations"]["evidence"]


#: What each ``format=`` of an Apprise URL delivers (appriseit.com: "format … can be set to either text, html,
#: or markdown"), read the way that format is read.
APPRISE_READERS = {
    "markdown": readers.commonmark,
    "html": readers.html_body,
    "text": lambda text: readers.Reading(mentions=readers.chat_mentions(text), visible=text),
}


@pytest.mark.parametrize("fmt", APPRISE_READERS)
async def test_apprise_targets_of_every_format_show_data_but_never_mention_link_or_style(fmt, monkeypatch, clock,
                                                                                          spool):
    """A json:// target given ``format=`` receives the body Apprise made for a service of that format."""
    with FakeAppriseJson(clock) as fake:
        monkeypatch.setenv("AP_URL", f"{fake.url()}?format={fmt}")
        await send_both(Receiver(name="ap", apprise={"url": {"env": "AP_URL"}}), clock, spool)
    hostile, clean = accepted_json(fake)
    read = APPRISE_READERS[fmt]
    h = read(hostile["message"])
    assert_only_own_marks(h, read(clean["message"]))
    assert readers.chat_mentions(h.visible) == [] and readers.chat_mentions(hostile["title"]) == []


def rich_chars(block: dict) -> int:
    return sum(len(e["text"]) for o in block["elements"] for e in o["elements"])


def test_a_slack_rich_text_block_stays_within_a_sections_limit() -> None:
    for pad in range(2940, 2960):
        a = alert(1).model_copy(update={"summary": "x" * pad + "&" * 20})
        n = Notification(receiver="sl", group_key="g", alerts=[a], reason="new", at=T0)
        block = slack.blocks(n, Locale("en"))[2]
        assert block["type"] == "rich_text" and rich_chars(block) == slack.BLOCK_CHARS
        texts = "".join(e["text"] for o in block["elements"] for e in o["elements"])
        assert a.summary in texts and "&amp;" not in texts  # the text as it is: no entity to cut in half


def test_the_slack_fallback_cut_at_its_limit_never_shows_half_an_entity(monkeypatch) -> None:
    monkeypatch.setenv("SL_URL", "http://127.0.0.1/hook")
    cfg = Receiver(name="sl", slack={"url": {"env": "SL_URL"}}).channel
    for pad in range(5):  # the cut falls inside "&amp;" for four of these
        a = alert(1).model_copy(update={"summary": "x" * pad + "&" * 7000})
        n = Notification(receiver="sl", group_key="g", alerts=[a], reason="new", at=T0)
        text = json.loads(slack.build_request(cfg, n, Locale("en"), 0).body)["text"]
        assert len(text.encode()) <= slack.TEXT_LIMIT and text.endswith("\n…")
        assert re.sub(r"&amp;", "", text).count("&") == 0, text[-20:]


TABLE = "user        card-hours\n<!channel>  1.5\nbob_x `x`  2.0\n"


async def test_a_table_note_keeps_its_lines_in_a_code_block_and_stays_inert(monkeypatch, clock, spool):
    """The weekly usage digest's note is one fenced block (history/accounting.py): its lines survive
    on Slack and Feishu, inside the block nothing mentions, and no backtick from data ends it."""
    base = alert(1)
    a = base.model_copy(update={"evidence": Evidence(note="```\n" + TABLE + "```")})
    with FakeSlack(clock) as sl, FakeFeishu(clock) as fs:
        monkeypatch.setenv("SL_URL", sl.base + sl.path)
        monkeypatch.setenv("FS_URL", fs.base + fs.hook)
        d = Delivery([Receiver(name="sl", slack={"url": {"env": "SL_URL"}}),
                      Receiver(name="fs", feishu={"url": {"env": "FS_URL"}})], spool=spool, clock=clock, sleep=clock.sleep)
        try:
            for name in ("sl", "fs"):
                n = Notification(receiver=name, group_key="g", alerts=[a], reason="new", at=T0, id="t")
                assert (await d.deliver(n)).status == "delivered"
        finally:
            await d.aclose()
    body = sl.accepted[0].json
    shown = [o["elements"] for b in body["blocks"] if b["type"] == "rich_text" for o in b["elements"]
             if o["type"] == "rich_text_preformatted"]
    assert shown == [[{"type": "text", "text": TABLE}]]  # in Slack's preformatted block, exactly
    assert "\nuser        card-hours\n&lt;!channel&gt;  1.5\nbob_x `x`  2.0\n" in body["text"]
    assert readers.slack_mrkdwn(body["text"], mrkdwn=False).mentions == []
    assert readers.slack_blocks(body["blocks"]).mentions == []
    (div,) = fs.accepted[0].json["card"]["elements"]
    assert div["text"]["tag"] == "plain_text" and "\n" + TABLE in div["text"]["content"]
