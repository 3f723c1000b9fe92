"""Rule files: validation errors name the exact path; the default pack is valid; overrides."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwarden.app.cli import main
from gpuwarden.streams.rules import RulesError, load_rules

RULE = """
  - name: {name}
    scope: {scope}
    tier: attention
    summary: x
    when: {when}
"""


def _file(tmp_path: Path, *rules: tuple[str, str, str], head: str = "") -> Path:
    p = tmp_path / "rules.yaml"
    p.write_text(head + "rules:\n" + "".join(RULE.format(name=n, scope=s, when=w) for n, s, w in rules))
    return p


def test_default_pack_is_valid_and_covers_the_policy() -> None:
    names = set(load_rules().names())
    assert {"memory-leak", "oom-risk", "util-below-baseline", "idle-allocated-gpu", "idle-allocated-budget",
            "hw-slowdown", "thermal-slowdown", "power-brake", "xid-hardware", "xid-application",
            "xid-repeated", "ecc-double-bit", "row-remap", "temp-rising-constant-power", "gpu-lost",
            "driver-error", "version-skew"} <= names


def test_errors_name_the_path(tmp_path: Path) -> None:
    p = _file(tmp_path,
              ("ok", "gpu", '{threshold: {metric: util_gpu, op: "<", value: 5}}'),
              ("bad", "gpu", '{all: [{threshold: {metric: util_gpu, op: "<", value: 5}}, '
                             '{trend: {metric: mem_used_gib, window: soon, slope_above: 1}}]}'))
    with pytest.raises(RulesError) as e:
        load_rules(p)
    assert str(e.value) == (f"{p}: rules[1].when.all[1].trend.window: expected a duration such as "
                            "30s, 15m, 2h or 14d, got 'soon'")


def test_condition_must_be_exactly_one_kind(tmp_path: Path) -> None:
    with pytest.raises(RulesError) as e:
        load_rules(_file(tmp_path, ("a", "gpu", "{foo: 1}")))
    assert e.value.problems == [
        "rules[0].when: expected a mapping with exactly one of all, any, not, threshold, trend, growth, "
        "deviation, fall, count_within"]


def test_semantic_errors(tmp_path: Path) -> None:
    p = _file(tmp_path,
              ("a", "task", '{trend: {metric: nope, window: 5m, slope_above: 1}}'),
              ("b", "gpu", '{deviation: {metric: util_gpu, direction: below}}'),
              ("c", "class", '{count_within: {event: {kind: [xid]}, window: 1h}}'),
              ("a", "gpu", '{threshold: {metric: util_gpu, op: "<", value: 5}}'))
    with pytest.raises(RulesError) as e:
        load_rules(p)
    problems = e.value.problems
    assert problems[0].startswith("rules[0].when.trend.metric: unknown metric 'nope' for scope task")
    assert problems[1] == "rules[1].when.deviation: baselines exist per task class; use scope class"
    assert problems[2] == "rules[2].when.count_within: events are counted in scope gpu or node, not class"
    assert problems[3] == "rules[3].name: duplicate rule name 'a'"


def test_growth_errors(tmp_path: Path) -> None:
    p = _file(tmp_path,
              ("a", "task", '{growth: {metric: util_gpu, capacity: mem_total_gib, slope_above: 1}}'),
              ("b", "gpu", '{growth: {metric: mem_used_gib, capacity: time_to_oom_s, slope_above: 1}}'),
              ("c", "gpu", '{growth: {metric: mem_used_gib, capacity: mem_total_gib, slope_above: 1, '
                           'hold_min: 2h, hold_max: 1h}}'))
    with pytest.raises(RulesError) as e:
        load_rules(p)
    problems = e.value.problems
    assert problems[0] == "rules[0].when.growth: growth is judged per GPU; use scope gpu"
    assert problems[1].startswith("rules[1].when.growth.capacity: expected a series metric of scope gpu, "
                                  "not 'time_to_oom_s' (known: allocated, ")
    assert problems[2] == "rules[2].when.growth.hold_min: expected at most hold_max (3600 s)"
    with pytest.raises(RulesError) as e:
        load_rules(_file(tmp_path, ("d", "gpu", "{growth: {metric: mem_used_gib, capacity: mem_total_gib}}")))
    assert e.value.problems == ["rules[0].when.growth.slope_above: field required"]


def test_extends_default_overrides_and_disables(tmp_path: Path) -> None:
    p = _file(tmp_path, ("memory-leak", "gpu", '{threshold: {metric: util_gpu, op: "<", value: 1}}'),
              ("my-rule", "gpu", '{threshold: {metric: util_gpu, op: ">", value: 99}}'),
              head="extends: default\ndisable: [oom-risk]\n")
    pack = load_rules(p)
    assert "oom-risk" not in pack.names() and pack.names()[-1] == "my-rule"
    leak = next(r for r in pack.rules if r.name == "memory-leak")
    assert leak.spec.summary == "x"


def test_rules_check_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = _file(tmp_path, ("ok", "gpu", '{threshold: {metric: util_gpu, op: "<", value: 5}}'))
    assert main(["rules", "check", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n  - name: x\n    scope: gpu\n    tier: urgent\n    summary: s\n"
                   "    when: {threshold: {metric: util_gpu, op: '<', value: 5}}\n")
    assert main(["rules", "check", str(bad)]) == 2
    assert f"{bad}: rules[0].tier: input should be 'info', 'attention' or 'critical'" in capsys.readouterr().err


def test_shown_values_are_validated_and_recorded_without_deciding(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - {name: a, scope: gpu, tier: info, summary: s,\n"
                   "     when: {threshold: {metric: util_gpu, op: '<', value: 5}},\n"
                   "     show: [{metric: nope}, {metric: power_w, agg: median}]}\n")
    with pytest.raises(RulesError) as e:
        load_rules(bad)
    assert e.value.problems[0].startswith("rules[0].show[1].agg: input should be")
    bad.write_text(bad.read_text().replace("agg: median", "agg: avg"))
    with pytest.raises(RulesError) as e:
        load_rules(bad)
    assert e.value.problems[0].startswith("rules[0].show[0].metric: unknown metric 'nope' for scope gpu")
