"""Router policy with an injected clock: exact times for grouping, repeats, resolved, escalation."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gpuwarden.app.settings import validate_settings
from gpuwarden.config import ConfigError
from gpuwarden.contract import Ack, AlertTransition, OnCallOverride, Silence
from gpuwarden.notifiers import slack
from gpuwarden.notifiers.config import NotifyConfig, parse_matcher
from gpuwarden.notifiers.control import ControlState
from gpuwarden.notifiers.render import Locale
from gpuwarden.notifiers.router import Router

T0 = 1_700_000_000.0
DAY = 86400.0


def receivers(*names: str) -> list[dict[str, Any]]:
    return [{"name": n, "feishu": {"url": {"env": f"URL_{n.upper().replace('-', '_')}"}}} for n in names]


def config(**kw: Any) -> NotifyConfig:
    base: dict[str, Any] = {
        "receivers": receivers("team-chat", "alice-chat", "llm-chat", "pager", "lead-chat", "boss"),
        "team": "team-chat",
        "owners": {"users": {"alice": "alice-chat"}, "projects": {"llm": "llm-chat"}},
        "schedules": {
            "primary": {"rotation": "weekly", "start": T0 - 3 * DAY, "users": ["ann", "ben", "cat"]},
            "secondary": {"rotation": "daily", "start": T0, "users": ["dan", "eve"]},
        },
        "escalation": [
            {"after": "0s", "receivers": ["pager"], "schedule": "primary"},
            {"after": "15m", "receivers": ["pager", "lead-chat"], "schedule": "secondary"},
            {"after": "30m", "receivers": ["boss"]},
        ],
    }
    base.update(kw)
    return NotifyConfig.model_validate(base)


def alert(fp: str, *, tier: str = "attention", state: str = "firing", rule: str = "mem_leak",
          started: float = T0, ts: float | None = None, **labels: str) -> AlertTransition:
    labels = {"node": "node-01", **labels}
    return AlertTransition(
        fingerprint=fp, rule=rule, tier=tier, state=state, labels=labels, started_at=started,
        ended_at=None if state == "firing" else ts, ts=ts if ts is not None else started,
        summary=f"{rule} on {labels['node']}",
    )


def sent(notes: list) -> list[tuple[str, str, list[str]]]:
    return [(n.receiver, n.reason, [f"{a.fingerprint}:{a.state.value}" for a in n.alerts]) for n in notes]


def test_attention_is_grouped_for_group_wait_then_interval_then_repeat() -> None:
    r = Router(config(route={"receiver": "@owner", "group_by": ["rule", "node"], "group_wait": "30s",
                             "group_interval": "5m", "repeat_interval": "1000s"}))
    assert r.on_transition(alert("a", user="alice"), T0) == []
    assert r.on_transition(alert("b", user="alice", gpu="3", started=T0 + 10), T0 + 10) == []
    assert r.tick(T0 + 29.9) == []
    first = r.tick(T0 + 30)
    assert sent(first) == [("alice-chat", "new", ["a:firing", "b:firing"])]
    assert r.next_deadline() == T0 + 330
    # A third alert joins the group; it waits for the group_interval, not the group_wait.
    assert r.on_transition(alert("c", user="alice", started=T0 + 40), T0 + 40) == []
    assert r.tick(T0 + 329) == []
    assert sent(r.tick(T0 + 330)) == [("alice-chat", "update", ["a:firing", "b:firing", "c:firing"])]
    # repeat_interval 1000 s is rounded up to the group_interval cadence: 330 + 1200.
    for t in (T0 + 630, T0 + 930, T0 + 1230):
        assert r.tick(t) == []
    assert sent(r.tick(T0 + 1530)) == [("alice-chat", "repeat", ["a:firing", "b:firing", "c:firing"])]


def test_owner_routing_by_user_then_project_then_team() -> None:
    r = Router(config(route={"receiver": "@owner", "group_by": ["..."], "group_wait": "0s"}))
    out = r.on_transition(alert("a", user="alice", project="llm"), T0)
    out += r.on_transition(alert("b", user="bob", project="llm"), T0)
    out += r.on_transition(alert("c", user="bob", project="cv"), T0)
    assert [(n.receiver, n.alerts[0].fingerprint) for n in out] == [
        ("alice-chat", "a"), ("llm-chat", "b"), ("team-chat", "c")]


def test_critical_pages_oncall_and_team_at_once_with_mention() -> None:
    r = Router(config())
    out = r.on_transition(alert("x", tier="critical", rule="xid_48", gpu="2"), T0 + 60)
    assert sorted(sent(out)) == [("pager", "new", ["x:firing"]), ("team-chat", "new", ["x:firing"])]
    # primary rotation started 3 days before T0: turn 0 → ann.
    assert all(n.mentions == ["ann"] for n in out)


def test_info_is_recorded_only() -> None:
    r = Router(config())
    assert r.on_transition(alert("i", tier="info"), T0) == []
    assert r.tick(T0 + 3600) == [] and r.groups == {}


def test_resolved_is_sent_on_the_next_group_interval() -> None:
    r = Router(config())
    r.on_transition(alert("x", tier="critical"), T0)
    assert r.on_transition(alert("x", tier="critical", state="resolved", ts=T0 + 10), T0 + 10) == []
    assert r.tick(T0 + 59) == []
    assert sorted(sent(r.tick(T0 + 60))) == [("pager", "resolved", ["x:resolved"]),
                                             ("team-chat", "resolved", ["x:resolved"])]
    assert r.groups == {}


def test_resolved_before_group_wait_is_never_sent() -> None:
    r = Router(config())
    r.on_transition(alert("a"), T0)
    r.on_transition(alert("a", state="resolved", ts=T0 + 5), T0 + 5)
    assert r.tick(T0 + 30) == [] and r.groups == {}


def test_dedup_of_at_least_once_input() -> None:
    r = Router(config())
    fire, res = alert("x", tier="critical"), alert("x", tier="critical", state="resolved", ts=T0 + 5)
    assert len(r.on_transition(fire, T0)) == 2
    assert r.on_transition(fire, T0 + 1) == []
    r.on_transition(res, T0 + 5)
    assert r.on_transition(fire, T0 + 6) == []       # a stale redelivery after the resolve
    assert r.on_transition(res, T0 + 7) == []
    assert len(r.tick(T0 + 60)) == 2                  # one resolved per receiver, once
    again = alert("x", tier="critical", started=T0 + 100)
    assert len(r.on_transition(again, T0 + 100)) == 2  # a new episode of the same fingerprint


def test_a_redelivered_transition_changes_no_page_source_group_or_notification() -> None:
    """``Router._is_new`` alone owns redelivery dedup (docs/routing.md): a transition seen before
    returns nothing and leaves the whole state (pages, inhibition sources, groups) byte for byte."""
    control = ControlState()
    r = Router(config(), control)
    lost = alert("lost", tier="critical", rule="gpu_lost", gpu="3")
    assert len(r.on_transition(lost, T0)) == 2
    assert r.on_transition(alert("g1", gpu="1"), T0 + 1) == []  # inhibited by the lost GPU
    control.apply(Ack(fingerprint="lost", by="ann", at=T0 + 300))
    assert [n.reason for n in r.tick(T0 + 900)] == ["ack", "ack"]  # the page is closed by the ack
    for redelivered, at in [(lost, T0 + 1000), (alert("g1", gpu="1"), T0 + 1001)]:
        state = r.dump()
        assert r.on_transition(redelivered, at) == [] and r.dump() == state  # no page re-opened, no source re-set
    resolved = alert("lost", tier="critical", rule="gpu_lost", gpu="3", state="resolved", ts=T0 + 2000)
    assert sorted(sent(r.on_transition(resolved, T0 + 2000))) == [
        ("pager", "resolved", ["lost:resolved"]), ("team-chat", "new", ["g1:firing"]),
        ("team-chat", "resolved", ["lost:resolved"])]
    state = r.dump()
    assert r.on_transition(resolved, T0 + 2001) == [] and r.dump() == state  # no group re-opened


def test_an_updated_firing_is_sent_once_as_an_update_never_as_a_new_page() -> None:
    """An open alert sent again with a new likely cause (same episode, a later ts: streams/evaluate.py
    re-judges causes): the groups that had it get one ``update`` notification with the new words;
    the page stays the one paged (no new page, escalation keeps its times but tells the new words);
    a redelivery of the firing or of the update is a repeat."""
    r = Router(config())
    fire = alert("x", tier="critical")
    assert sorted(sent(r.on_transition(fire, T0))) == [("pager", "new", ["x:firing"]), ("team-chat", "new", ["x:firing"])]
    update = fire.model_copy(update={"ts": T0 + 30, "summary": "mem_leak on node-01. Likely cause: a new one."})
    assert r.on_transition(update, T0 + 30) == []  # waits for the groups' interval, like any change
    state = r.dump()
    for redelivered in (fire, update):
        assert r.on_transition(redelivered, T0 + 40) == [] and r.dump() == state
    out = r.tick(T0 + 60)
    assert sorted(sent(out)) == [("pager", "update", ["x:firing"]), ("team-chat", "update", ["x:firing"])]
    assert all(n.alerts[0].summary.endswith("Likely cause: a new one.") for n in out)
    assert r.tick(T0 + 120) == []  # sent once
    assert r.pages["x"].paged_at == T0 and r.pages["x"].alert.ts == T0 + 30
    lvl1 = r.tick(T0 + 900)
    assert [(n.reason, n.escalation_level) for n in lvl1] == [("escalation", 1), ("escalation", 1)]
    assert lvl1[0].alerts[0].summary.endswith("Likely cause: a new one.")


def test_silence_mutes_until_it_expires() -> None:
    control = ControlState()
    control.apply(Silence(id="s1", matchers=[parse_matcher("node=node-01"), parse_matcher("rule=~mem.*")],
                          starts_at=T0, ends_at=T0 + 100, created_by="ops"))
    r = Router(config(), control)
    r.on_transition(alert("a"), T0)
    r.on_transition(alert("b", node="node-02"), T0)
    assert [n.alerts[0].labels["node"] for n in r.tick(T0 + 30)] == ["node-02"]
    assert r.tick(T0 + 99) == []


def test_silence_expiry_sends_at_the_first_flush_after() -> None:
    control = ControlState()
    control.apply(Silence(id="s1", matchers=[parse_matcher("node=node-01")],
                          starts_at=T0, ends_at=T0 + 100, created_by="ops"))
    r = Router(config(), control)
    r.on_transition(alert("a"), T0)
    assert r.tick(T0 + 30) == []
    assert sent(r.tick(T0 + 330)) == [("team-chat", "new", ["a:firing"])]


def test_ack_stops_repeats_and_escalation() -> None:
    control = ControlState()
    r = Router(config(), control)
    crit = alert("x", tier="critical")
    r.on_transition(crit, T0)
    control.apply(Ack(fingerprint="x", by="ann", at=T0 + 300))
    # no escalation; the receivers that were paged hear of the ack once
    assert sent(r.tick(T0 + 900)) == [("pager", "ack", ["x:firing"]), ("team-chat", "ack", ["x:firing"])]
    assert r.tick(T0 + 901) == []
    assert r.tick(T0 + 3600 + 60) == []      # no repeat (critical repeat_interval 1h)
    # An ack of an earlier episode does not cover a new one.
    r.on_transition(alert("x", tier="critical", state="resolved", ts=T0 + 4000), T0 + 4000)
    r.tick(T0 + 4020)
    r.on_transition(alert("x", tier="critical", started=T0 + 5000), T0 + 5000)
    assert [n.escalation_level for n in r.tick(T0 + 5900)] == [1, 1]


def test_unacked_repeat_for_critical() -> None:
    r = Router(config(escalation=[]))
    r.on_transition(alert("x", tier="critical"), T0)
    assert r.tick(T0 + 3599) == []
    assert sorted(sent(r.tick(T0 + 3600))) == [("team-chat", "repeat", ["x:firing"])]


def test_escalation_exact_times_levels_and_mentions() -> None:
    r = Router(config())
    r.on_transition(alert("x", tier="critical"), T0)
    assert r.next_deadline() == T0 + 60
    assert r.tick(T0 + 899.9) == []
    lvl1 = r.tick(T0 + 900)
    assert [(n.receiver, n.reason, n.escalation_level) for n in lvl1] == [
        ("pager", "escalation", 1), ("lead-chat", "escalation", 1)]
    assert lvl1[0].mentions == ["dan"]       # secondary daily rotation starts at T0 with dan
    assert r.tick(T0 + 1799) == []
    lvl2 = r.tick(T0 + 1800)
    assert [(n.receiver, n.escalation_level, n.mentions) for n in lvl2] == [("boss", 2, [])]
    assert r.tick(T0 + 3599) == []
    assert sorted(sent(r.tick(T0 + 3600))) == [("pager", "repeat", ["x:firing"]),
                                               ("team-chat", "repeat", ["x:firing"])]


def test_tokens_in_escalation_levels_are_resolved_for_the_alert() -> None:
    """The config accepts ``@team``/``@owner``/``@oncall`` among a level's receivers (and in ``team``,
    ``owners``): ``@oncall`` of a route and each level then send to the receivers those stand for,
    never to a receiver named ``@team`` that delivery does not have."""
    r = Router(config(escalation=[{"receivers": ["pager", "@team"], "schedule": "primary"},
                                  {"after": "15m", "receivers": ["@owner", "@oncall"]}],
                      route={"receivers": ["@oncall"], "group_by": ["..."], "group_wait": "0s"}))
    first = r.on_transition(alert("x", tier="critical", user="alice"), T0)
    assert [(n.receiver, n.reason, n.mentions) for n in first] == [
        ("pager", "new", ["ann"]), ("team-chat", "new", ["ann"])]
    lvl1 = r.tick(T0 + 900)
    assert [(n.receiver, n.reason, n.escalation_level) for n in lvl1] == [
        ("alice-chat", "escalation", 1), ("pager", "escalation", 1), ("team-chat", "escalation", 1)]


def test_a_token_inside_its_own_resolution_stands_for_no_one() -> None:
    """``escalation[0]: [@oncall, pager]`` goes round in a circle beside a receiver: the circle
    resolves to nothing instead of recursing without end, the receiver stays."""
    cfg = config(escalation=[{"receivers": ["@oncall", "pager"]}])
    assert cfg.resolve("@oncall") == ["pager"]


@pytest.mark.parametrize("bad, where", [
    ({"escalation": [{"receivers": ["@oncall"]}]}, "escalation[0].receivers[0]: @oncall leads back to itself"),
    ({"team": "@owner", "owners": {}}, "team: @owner leads back to itself"),
    ({"team": "@owner", "owners": {}, "escalation": [{"receivers": ["@team"]}]}, "reaches no receiver"),
])
def test_a_token_that_only_leads_back_to_itself_is_refused_at_load(bad: dict[str, Any], where: str) -> None:
    """Else an alert routed to it would reach no one, silently."""
    with pytest.raises(ValidationError) as e:
        config(**bad)
    assert where in str(e.value)


def test_escalation_stops_when_resolved() -> None:
    r = Router(config())
    r.on_transition(alert("x", tier="critical"), T0)
    r.on_transition(alert("x", tier="critical", state="resolved", ts=T0 + 600), T0 + 600)
    assert all(n.reason == "resolved" for n in r.tick(T0 + 900))
    assert r.tick(T0 + 1800) == []


def test_inhibition_lost_gpu_mutes_that_nodes_gpu_and_task_alerts() -> None:
    r = Router(config(route={"receiver": "team-chat", "group_by": ["..."], "group_wait": "0s"}))
    lost = r.on_transition(alert("lost", tier="critical", rule="gpu_lost", gpu="3"), T0)
    assert sent(lost) == [("team-chat", "new", ["lost:firing"])]  # the source is not muted by itself
    assert r.on_transition(alert("g1", gpu="1"), T0 + 1) == []
    assert r.on_transition(alert("t1", task="llama", rule="step_slow"), T0 + 1) == []
    other = r.on_transition(alert("g2", gpu="1", node="node-02"), T0 + 1)
    assert sent(other) == [("team-chat", "new", ["g2:firing"])]
    # Once the source resolves, the muted alerts surface at their next flush.
    r.on_transition(alert("lost", tier="critical", rule="gpu_lost", gpu="3", state="resolved",
                          ts=T0 + 100), T0 + 100)
    later = r.tick(T0 + 301)
    assert sorted(a for *_, al in sent(later) for a in al) == ["g1:firing", "lost:resolved", "t1:firing"]


def test_configured_inhibit_rule_with_equal_labels() -> None:
    r = Router(config(route={"receiver": "team-chat", "group_by": ["..."], "group_wait": "0s"},
                      inhibit_rules=[{"source_matchers": ["rule=node_down"], "target_matchers": ["tier=attention"],
                                      "equal": ["node", "rack"]}]))
    r.on_transition(alert("src", tier="critical", rule="node_down", rack="r1"), T0)
    assert r.on_transition(alert("a", rack="r1"), T0) == []
    assert len(r.on_transition(alert("b", rack="r2"), T0)) == 1


def test_routing_tree_matchers_continue_and_inheritance() -> None:
    cfg = config(route={
        "receiver": "team-chat", "group_by": ["node"], "group_wait": "10s",
        "routes": [
            {"matchers": ["project=llm"], "receiver": "llm-chat", "continue": True},
            {"matchers": ["rule=~mem.*", "user!~bot.*"], "receiver": "alice-chat", "group_wait": "0s"},
            {"matchers": ["rule!=never"], "receiver": "boss"},
        ]})
    r = Router(cfg)
    assert sent(r.on_transition(alert("a", project="llm"), T0)) == [("alice-chat", "new", ["a:firing"])]
    assert sent(r.tick(T0 + 10)) == [("llm-chat", "new", ["a:firing"])]      # inherited group_wait
    r.on_transition(alert("b", user="bot-7"), T0 + 20)                         # falls to the third route
    assert sent(r.tick(T0 + 30)) == [("boss", "new", ["b:firing"])]


def test_empty_receivers_route_records_only() -> None:
    r = Router(config(route={"receiver": "team-chat", "routes": [{"matchers": ["node=node-09"], "receivers": []}]}))
    r.on_transition(alert("a", node="node-09"), T0)
    assert r.tick(T0 + 3600) == []


def test_same_input_same_notifications() -> None:
    def run() -> list[tuple[str, str, float, str]]:
        r = Router(config())
        out = r.on_transition(alert("x", tier="critical"), T0) + r.on_transition(alert("a"), T0 + 1)
        for t in range(0, 4000, 30):
            out += r.tick(T0 + t)
        return [(n.receiver, n.reason, n.at, n.id) for n in out]

    first = run()
    assert first == run() and len({i for *_, i in first}) == len(first)


def test_oncall_override_from_control_state_decides_who_is_mentioned() -> None:
    control = ControlState()
    control.apply(OnCallOverride(id="swap1", schedule="primary", user="zoe", starts_at=T0, ends_at=T0 + DAY))
    r = Router(config(), control)
    assert {tuple(n.mentions) for n in r.on_transition(alert("x", tier="critical"), T0 + 10)} == {("zoe",)}


@pytest.mark.parametrize("bad, where", [
    ({"route": {"receiver": "nobody"}}, "route.receivers[0]"),
    ({"team": "ghost"}, "team"),
    ({"route": {"receiver": "@boss"}}, "expected @owner, @oncall or @team"),
    ({"escalation": [{"receivers": ["pager"], "schedule": "tertiary"}]}, "escalation[0].schedule"),
    ({"route": {"matchers": ["node=~("]}}, "valid regular expression"),
    ({"route": {"matchers": ["what"]}}, "expected a matcher"),
])
def test_config_errors_name_the_place(bad: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as e:
        config(**bad)
    assert where in str(e.value)


def on_slack(*slack: str, **kw: Any) -> dict[str, Any]:
    """The ``notify:`` section of :func:`config` with the receivers ``slack`` on Slack."""
    base = config().model_dump(mode="json", by_alias=True, exclude_unset=True) | kw
    for r in base["receivers"]:
        if r["name"] in slack:
            r.pop("feishu")
            r["slack"] = {"url": {"env": "URL_SLACK"}}
    return base


@pytest.mark.parametrize("slack, kw, where", [
    (("team-chat",), {}, "schedules.primary.users[0]"),  # the default tree's critical route: @team, mention_oncall
    (("lead-chat",), {}, "schedules.secondary.users[0]"),  # escalation level 1's receivers
    (("boss",), {"receivers": [*receivers("team-chat", "alice-chat", "llm-chat", "lead-chat", "boss"),
                               {"name": "pager", "feishu": {"url": {"env": "URL_PAGER"}}, "fallback": ["boss"]}]},
     "schedules.primary.users[0]"),  # the pager's fallback
])
def test_an_on_call_mentioned_on_slack_must_be_a_slack_id_at_load(slack, kw, where) -> None:
    """Slack mentions by id only (docs.slack.dev: ``<@U…>``, ``<!subteam^S…>``, ``user``/``usergroup``
    elements): ``ann`` would go out as text that mentions no one, so the config is refused at load."""
    with pytest.raises(ConfigError) as e:
        validate_settings({"notify": on_slack(*slack, **kw)}, "gw.yaml")
    assert (f"gw.yaml: notify: {where}: expected a Slack member id (U… or W…) or user-group id (S…), as receiver "
            f"'{slack[0]}' (slack) mentions this schedule's on-call (got ") in str(e.value)


def test_slack_ids_load_and_reach_slack_as_mentions() -> None:
    schedules = {"primary": {"start": T0, "users": ["U0G9QF9C6", "W012A3CDE"],
                             "overrides": [{"user": "SAZ94GDB8", "starts_at": T0 + DAY, "ends_at": T0 + 2 * DAY}]},
                 "secondary": {"users": ["dan", "eve"]}}  # level 1 pages no Slack receiver
    settings = validate_settings({"notify": on_slack("team-chat", schedules=schedules)}, "gw.yaml")
    r = Router(settings.notify, ControlState())
    (chat,) = [n for n in r.on_transition(alert("x", tier="critical"), T0 + 10) if n.receiver == "team-chat"]
    assert {"type": "user", "user_id": "U0G9QF9C6"} in slack.blocks(chat, Locale("en"))[1]["elements"][-1]["elements"]
    assert "<@U0G9QF9C6>" in slack.fallback(chat, Locale("en"))


def test_an_owner_chat_on_slack_takes_any_schedule() -> None:
    """Attention goes to the owner's chat without a mention: a Slack owner chat asks nothing of the schedules."""
    validate_settings({"notify": on_slack("alice-chat", "llm-chat")}, "gw.yaml")


def test_owner_reaches_the_team_chat_for_the_slack_check_only_without_a_default_owner() -> None:
    """The router sends ``@owner`` to the team only for an alert of no known owner when ``owners.default``
    is unset: a mentioning ``[@owner]`` route asks Slack ids for a Slack team chat only then."""
    route = {"receivers": ["@owner"], "mention_oncall": True}
    validate_settings({"notify": on_slack("team-chat", route=route,
                                          owners={"users": {"alice": "alice-chat"}, "default": "lead-chat"})}, "gw.yaml")
    with pytest.raises(ConfigError, match=r"schedules\.primary\.users\[0\]: .* receiver 'team-chat' \(slack\)"):
        validate_settings({"notify": on_slack("team-chat", route=route, owners={"users": {"alice": "alice-chat"}})},
                          "gw.yaml")


def test_reach_is_every_receiver_tokens_may_send_to_fallbacks_included() -> None:
    """:meth:`NotifyConfig.reach`, what readiness and the Slack on-call check ask: names, ``@team``,
    ``@oncall``, every owner's chat and, without ``owners.default``, the team; then their fallbacks.
    A name that is no receiver reaches nothing (at load it is an error of its own)."""
    cfg = config(receivers=[*receivers("team-chat", "alice-chat", "llm-chat", "boss", "sms"),
                            {"name": "pager", "feishu": {"url": {"env": "URL_PAGER"}}, "fallback": ["lead-chat"]},
                            {"name": "lead-chat", "feishu": {"url": {"env": "URL_LEAD"}}, "fallback": ["sms"]}])
    assert cfg.reach(["pager"]) == {"pager", "lead-chat", "sms"}  # a fallback's fallback too
    assert cfg.reach(["@oncall"]) == {"pager", "lead-chat", "sms"}
    assert cfg.reach(["@team"]) == {"team-chat"}
    assert cfg.reach(["@owner"]) == {"alice-chat", "llm-chat", "team-chat"}
    assert config(owners={"users": {"alice": "alice-chat"}, "default": "boss"}).reach(["@owner"]) == {
        "alice-chat", "boss"}
    assert config(team=None).reach(["@team"]) == set() and cfg.reach([]) == set()
    assert cfg.reach(["ghost", "@team"]) == {"team-chat"}
    with pytest.raises(ValidationError, match=r"escalation\[0\]\.receivers\[0\]: expected a receiver name"):
        config(escalation=[{"receivers": ["ghost"]}])
    nested = config(escalation=[{"receivers": ["pager", "@team"]}], owners={"default": "@oncall"})
    assert nested.reach(["@oncall"]) == nested.reach(["@owner"]) == {"pager", "team-chat"}


def test_ack_reaches_every_level_that_was_paged() -> None:
    control = ControlState()
    r = Router(config(), control)
    r.on_transition(alert("x", tier="critical"), T0)
    assert len(r.tick(T0 + 900)) == 2        # level 1: pager and lead-chat
    control.apply(Ack(fingerprint="x", by="ben", at=T0 + 1000))
    acks = r.tick(T0 + 1000)
    assert [(n.receiver, n.reason, n.escalation_level, n.group_key) for n in acks] == [
        ("lead-chat", "ack", 1, "ack/x"), ("pager", "ack", 1, "ack/x"), ("team-chat", "ack", 1, "ack/x")]
    assert r.tick(T0 + 1800) == []           # no level 2, no second ack


def test_ack_of_an_alert_never_paged_sends_nothing() -> None:
    control = ControlState()
    r = Router(config(escalation=[]), control)
    r.on_transition(alert("x", tier="critical"), T0)
    control.apply(Ack(fingerprint="x", by="ann", at=T0 + 10))
    assert r.tick(T0 + 10) == []


def scripted_run(r: Router, steps: list[tuple[float, Any]]) -> list[tuple[str, str, float, str]]:
    """Transitions (or ticks, for None) at their times; what was sent, with ids."""
    out = []
    for t, tr in steps:
        out += r.on_transition(tr, t) if tr is not None else r.tick(t)
    return [(n.receiver, n.reason, n.at, n.id) for n in out]


def test_dump_and_load_continue_exactly_where_the_router_stopped() -> None:
    first = [(T0, alert("x", tier="critical")), (T0 + 1, alert("a", user="alice")),
             (T0 + 2, alert("lost", tier="critical", rule="gpu_lost", gpu="3")), (T0 + 31, None)]
    later = [(T0 + 60, alert("x", tier="critical", state="resolved", ts=T0 + 50)),
             (T0 + 61, alert("g", gpu="1")),                     # inhibited by "lost" (same node)
             (T0 + 61, alert("a", user="alice")),                 # a redelivery: dropped
             (T0 + 120, None), (T0 + 902, None), (T0 + 4000, None)]
    expected = scripted_run(Router(config()), first + later)
    before = Router(config())
    got_first = scripted_run(before, first)
    data = before.dump()
    twin = Router(config())
    scripted_run(twin, first)
    assert twin.dump() == data                                   # deterministic
    after = Router(config())
    assert after.load(data) == [] and after.dump() == data
    assert after.next_deadline() == before.next_deadline()
    got_later = scripted_run(after, later)
    assert got_first + got_later == expected
    assert {(rcv, why) for rcv, why, *_ in got_later} >= {("pager", "resolved"), ("team-chat", "resolved"),
                                                        ("lead-chat", "escalation"), ("team-chat", "repeat")}


def test_load_refuses_what_is_not_a_router_dump_and_drops_groups_of_removed_routes() -> None:
    r = Router(config())
    r.on_transition(alert("a"), T0)
    before = r.dump()
    for bad in (b"{not json", b'{"version": 99}', b'{"version": 1}', b"[]"):
        with pytest.raises(ValueError, match="router state"):
            r.load(bad)
    assert r.dump() == before
    old = Router(config(route={"receiver": "team-chat", "routes": [{"matchers": ["node=node-01"], "receiver": "boss"}]}))
    old.on_transition(alert("b"), T0)
    new = Router(config(route={"receiver": "team-chat"}))
    assert new.load(old.dump()) == ["group 0.0/boss/{}: route 0.0 is not in the routing tree now"]
    assert new.groups == {} and new.tick(T0 + 3600) == []


def test_receivers_paged_only_by_escalation_hear_the_resolve() -> None:
    """lead-chat and boss got the alert from escalation levels, not from a group: they get its resolve too."""
    r = Router(config())
    r.on_transition(alert("x", tier="critical"), T0)
    r.tick(T0 + 900)
    r.tick(T0 + 1800)
    out = r.on_transition(alert("x", tier="critical", state="resolved", ts=T0 + 2000), T0 + 2000)
    out += r.tick(T0 + 2100)
    assert sorted(sent(out)) == [("boss", "resolved", ["x:resolved"]), ("lead-chat", "resolved", ["x:resolved"]),
                                 ("pager", "resolved", ["x:resolved"]), ("team-chat", "resolved", ["x:resolved"])]


def test_simulated_alerts_reach_only_the_receivers_that_opt_in() -> None:
    """Issue #18, defect 6: the default tree pages @oncall and @team at once; with only the team
    chat opted in, a simulated critical goes there, never to the pager, not even by escalation."""
    rs = receivers("team-chat", "pager", "lead-chat", "boss")
    rs[0]["accept_simulated"] = True
    r = Router(config(receivers=rs, owners={}))
    sim = alert("s", tier="critical", node="sim-node-00", simulated="true")
    real = alert("r", tier="critical", node="gpu-box-1")
    assert sent(r.on_transition(sim, T0)) == [("team-chat", "new", ["s:firing"])]
    assert sorted(sent(r.on_transition(real, T0))) == [("pager", "new", ["r:firing"]),
                                                       ("team-chat", "new", ["r:firing"])]
    later = sent(r.tick(T0 + 31 * 60))  # past every escalation level: only the real alert climbs
    assert later and all(fps == ["r:firing"] for _, _, fps in later)
