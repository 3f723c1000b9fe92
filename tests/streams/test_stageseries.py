"""The worker's SLO series from a real inference stage: budget left and burn rates per service and
objective, a service on two nodes showing its worst (tests/integration/test_prometheus_stack.py has
the scheduler series from a real Slurm's jobs)."""

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


def test_a_service_on_two_nodes_shows_its_worst_budget_and_burn() -> None:
    s = stage(slo={"chat": {"error_rate": "1%", "window": "30d"}})
    good, bad = Feed(s), Feed(s)
    for _ in range(10):  # gn1: all good; gn2: 10 % failed, a burn of 10 against a 1 % budget
        for f, rec in ((good, good.record(ok=100)), (bad, bad.record(ok=90, failed=10).model_copy(update={"node": "gn2"}))):
            s.process(rec)
            f.minute += 1
            f.seq += 1
    series = StageSeries()
    series.read(NoJoin(), NoJoin(), s)
    v = {(m.name, tuple(sorted(x.labels.items()))): x.value for m in series.collect() for x in m.samples}
    # Minutes 0-8 released (the 30 s lateness holds the 10th), minute 8 open: minutes 0-7 judged,
    # watched since the first interval's start (30 s before minute 0).
    left = v["gpuwarden_streams_slo_budget_remaining_ratio", (("service", "chat"), ("sli", "error_rate"))]
    assert left == pytest.approx(1 - 10 * (8 * 60 + 30) / WINDOW_S)
    burns = {dict(k[1])["window"]: x for k, x in v.items() if k[0] == "gpuwarden_streams_slo_burn_rate"}
    assert burns == {w: pytest.approx(10.0) for w in ("5m", "30m", "1h", "6h", "3d")}
    assert s.slo_status()[0].node == "gn1" and s.slo_status()[0].burn[300.0] == 0  # the other node's, not shown


def test_windows_are_named_as_prometheus_writes_durations() -> None:
    assert [window_label(w) for w in (300, 1800, 3600, 21600, 259200, 90)] == ["5m", "30m", "1h", "6h", "3d", "90s"]
