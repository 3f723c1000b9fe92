"""Evidence says only what was observed (issue #18, defect 4).

A summary sentence comes from a value the alert measured; a missing input is said as missing;
a resolve carries the figures at resolution; a percentage's band lies in [0, 100]; the band a
class shows is the band its rule judges (``min_delta`` included).
"""

from __future__ import annotations

from gpuwarden.contract import AlertState
from gpuwarden.notifiers.render import Locale, alert_block
from gpuwarden.streams.alerts import AlertSlot
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.evaluate import resolve_all

from tests.streams.test_checkpoint_baseline import CONFIG, HOUR, STARVE_AT, _long_checkpoints, _util
from tests.streams.traces import trace


def _leak_then_plateau(t: float) -> float:
    """44 GiB/h from 5 GiB after 10 min, stopping at ~45 GiB (55 min later)."""
    return 5.0 + min(max(0.0, t - 600.0), 3300.0) * 44.0 / 3600


def _leak(**kw) -> list:
    engine = Engine()
    out = engine.process_many(trace(int(600 + 3300 + 1800), lambda t: 90.0, _leak_then_plateau, **kw))
    return [t for t in out + engine.flush() if t.rule == "memory-leak"]


def test_a_leak_without_checkpoint_records_says_none_was_seen() -> None:
    fired = [t for t in _leak() if t.state == AlertState.FIRING]
    assert fired and "no checkpoint finished since it began" in fired[0].summary
    assert "not released" not in fired[0].summary
    assert "ckpt_released" not in fired[0].evidence.values


def test_a_leak_across_checkpoints_says_what_its_last_checkpoint_showed() -> None:
    fired = [t for t in _leak(checkpoints=lambda t: t % 300 >= 290, sdk=True) if t.state == AlertState.FIRING]
    assert fired and "checkpoints finished since it began: " in fired[0].summary
    assert fired[0].summary.endswith(", not released after the last).")
    assert fired[0].evidence.values["ckpt_released"] == 0


def test_a_resolve_carries_the_figures_at_resolution() -> None:
    fired, resolved = _leak()
    assert fired.state == AlertState.FIRING and resolved.state == AlertState.RESOLVED
    assert fired.evidence.values["mem_used_gib"] < 10  # flagged within minutes of the onset
    assert resolved.evidence.values["mem_used_gib"] > 44  # memory went on to ~45 GiB, then stopped
    v = resolved.evidence.values  # it stopped, nothing given back: the resolve says so in its own words
    assert resolved.summary.endswith(f"no longer grows: {v['mem_used_gib_peak']:.1f} GiB at its highest while the "
                                     f"alert was open, {v['mem_used_gib']:.1f} GiB now (0.0 GiB released).")
    assert resolved.evidence.held_for_s == resolved.ts - fired.ts  # how long it fired
    block = alert_block(resolved, Locale("en"))
    assert "At resolution: " in block and "mem_used_gib=45" in block


def test_percent_bands_are_clamped_and_the_band_shown_is_the_band_judged() -> None:
    engine = Engine(config=CONFIG)
    out = engine.process_many(trace(int(STARVE_AT + HOUR), _util(True), lambda t: 40.0,
                                    checkpoints=_long_checkpoints))
    fired = [t for t in out if t.rule == "util-below-baseline" and t.state == AlertState.FIRING]
    judged = fired[0].evidence.baseline
    assert judged.median == 97.0 and judged.low == 82.0  # min_delta 15: median 97, MAD 0
    assert judged.high == 100.0  # 97 + 15, clamped
    shown = engine.classes.baseline("llm-pretrain")["util_gpu"]
    assert (shown.low, shown.high) == (judged.low, judged.high)


def test_a_resolve_when_its_entity_is_gone_says_how_long_it_fired() -> None:
    """Issue #34: a rule without ``for`` fires at once (its evidence: held 0 s before firing); its
    task ends 21 s later and the resolve said ``held_for_s`` 0.0."""
    slot = AlertSlot("task-gone-rule")
    slot.firing_since, slot.tier, slot.evidence = 1000.0, "attention", {"values": {}, "held_for_s": 0.0}
    (resolved,) = resolve_all({"fp-1": slot}, 1021.0)
    assert resolved.state == AlertState.RESOLVED and resolved.started_at == 1000.0 and resolved.ended_at == 1021.0
    assert resolved.evidence.held_for_s == 21.0
