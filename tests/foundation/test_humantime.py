"""Spans as people read them: never cut to a coarser unit than they need (issue #34: a report
table showed 109.5 s as "1 min")."""

from __future__ import annotations

import pytest

from gpuwarden.humantime import ago, span


@pytest.mark.parametrize("seconds, said", [
    (0.4, "0 s"),
    (45, "45 s"),
    (109.5, "1 min 50 s"),  # 110 s rounded: 1 min and 50 s, not "1 min"
    (120, "2 min"),
    (725, "12 min 5 s"),
    (3599.6, "1 h"),
    (3725, "1 h 2 min"),
    (25_032, "6 h 57 min"),  # two units at most: the seconds of a span of hours are not said
    (90_000, "1 d 1 h"),
    (-109.5, "1 min 50 s"),
])
def test_span_keeps_its_two_largest_units(seconds: float, said: str) -> None:
    assert span(seconds) == said


def test_a_translation_passes_its_own_units() -> None:
    assert span(109.5, ("秒", "分钟", "小时", "天")) == "1 分钟 50 秒"
    assert ago(109.5) == "1 min 50 s ago"
