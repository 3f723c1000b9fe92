"""The worker's SLO series from a real inference stage and the service stage behind it: budget left
and burn rates per service and objective over all its nodes (tests/integration/test_prometheus_stack.py
has the scheduler series from a real Slurm's jobs)."""

from __future__ import annotations

import pytest

from gpuwarden.streams.stageseries import StageSeries, window_label
from tests.streams.test_inference_stage import Feed, stage

WINDOW_S = 30 * 86400.0


class NoJoin:
    """A node stage and a scheduler stage without jobs."""

    def allocations(self) -> list:
        return []

    def clusters(self) -> list[str]:
        return []


def test_a_service_on_two_nodes_shows_its_budget_and_burn_over_both() -> None:
    s = stage(slo={"chat": {"error_rate": "1%", "window": "30d"}})
    good, bad = Feed(s), Feed(s)
    for _ in range(10):  # gn1: all good; gn2: 10 % failed: 10 of 200 a minute, a burn of 5 against 1 %
        for f, rec in ((good, good.record(ok=100)), (bad, bad.record(ok=90, failed=10).model_copy(update={"node": "gn2"}))):
            s.process(rec)
            f.minute += 1
            f.seq += 1
    series = StageSeries()
    series.read([NoJoin()], [NoJoin()], [s.fleet])
    v = {(m.name, tuple(sorted(x.labels.items()))): x.value for m in series.collect() for x in m.samples}
    # Minutes 0-8 released (the 30 s lateness holds the 10th), minute 8 open on both nodes: the
    # service judged minutes 0-7, watched from minute 0's start.
    left = v["gpuwarden_streams_slo_budget_remaining_ratio", (("service", "chat"), ("sli", "error_rate"))]
    assert left == pytest.approx(1 - 5 * 8 * 60 / WINDOW_S)
    burns = {dict(k[1])["window"]: x for k, x in v.items() if k[0] == "gpuwarden_streams_slo_burn_rate"}
    assert burns == {w: pytest.approx(5.0) for w in ("5m", "30m", "1h", "6h", "3d")}


def test_windows_are_named_as_prometheus_writes_durations() -> None:
    assert [window_label(w) for w in (300, 1800, 3600, 21600, 259200, 90)] == ["5m", "30m", "1h", "6h", "3d", "90s"]
