"""Scheduler-stage alerts from the simulated cluster are marked ``simulated`` (issue #19): the
simulator's scheduler records say so on the wire, the stage's alerts and allocations carry it, and
a receiver without ``accept_simulated`` never gets them (as the node alerts, issue #18 defect 6)."""

from __future__ import annotations

import json

import pytest

from gpuwarden.contract import SIMULATED_LABEL, encode
from gpuwarden.contract import JobState as S
from gpuwarden.notifiers.config import NotifyConfig
from gpuwarden.notifiers.router import Router
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.schedstage import SchedulerStage
from tests.streams.sched_records import job, node, poll

T = 1_700_000_000.0
#: Each scheduler scenario and the rule it raises.
SCENARIOS = {"fragmentation": "scheduler-fragmentation", "gpus-unused": "job-gpus-unused",
             "preemption-storm": "scheduler-requeued-repeatedly", "queue-buildup": "scheduler-wait-above-baseline"}


def _alerts(scenario: str) -> list:
    sim = Simulator(scenario, nodes=1, gpus=8, seed=0, start_ts=T, tick_s=10.0, onset_s=600)
    records = list(sim.run(5400))
    sched = [r for r in records if r.schema_.startswith(("scheduler_", "node_capacity"))]
    assert sched and all(json.loads(encode(r))["simulated"] is True for r in sched)  # on the wire
    engine = Engine()
    return engine.process_many(records) + engine.flush()


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_simulated_clusters_alerts_say_so(scenario: str) -> None:
    alerts = _alerts(scenario)
    assert SCENARIOS[scenario] in {t.rule for t in alerts}
    assert all(t.labels[SIMULATED_LABEL] == "true" for t in alerts)


def test_allocations_from_a_simulated_cluster_carry_the_flag_and_a_real_ones_do_not() -> None:
    running = job("1", S.RUNNING, T, gpus=2, start=T - 60, alloc={"gn1": [0, 1]})
    for simulated in (True, False):
        stage = SchedulerStage(EngineConfig())
        allocs = []
        for r in poll(T, [running.model_copy(update={"simulated": simulated})], [node("gn1", T, 4, 2)]):
            allocs += stage.process(r.model_copy(update={"simulated": simulated}))[1]
        assert [a.simulated for a in allocs] == [simulated]


def _router(accept: bool) -> Router:
    return Router(NotifyConfig.model_validate({
        "receivers": [{"name": "ops", "feishu": {"url": {"env": "URL_OPS"}}, "accept_simulated": accept}],
        "team": "ops", "owners": {}, "route": {"receiver": "ops", "group_wait": "0s"}}))


@pytest.mark.parametrize("accept", [False, True])
def test_a_simulated_scheduler_alert_reaches_only_a_receiver_that_opts_in(accept: bool) -> None:
    fragmentation = next(t for t in _alerts("fragmentation") if t.rule == "scheduler-fragmentation")
    real = fragmentation.model_copy(update={"labels": {k: v for k, v in fragmentation.labels.items()
                                                        if k != SIMULATED_LABEL}, "fingerprint": "real"})
    for alert, reaches in ((fragmentation, accept), (real, True)):
        r = _router(accept)
        notes = r.on_transition(alert, alert.ts) + r.tick(alert.ts + 3600)
        assert [n.receiver for n in notes] == (["ops"] if reaches else []), alert.labels
