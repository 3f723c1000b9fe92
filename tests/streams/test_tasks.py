"""The tasks the runtime runs, without Kafka: records by partition in, outputs out.

A task's output must not depend on how the runtime cut its records into batches (fetch sizes,
which inputs a fetch held, which still had records on the broker): a node task fed a fleet's
records in random batches with random "behind" flags gives exactly the in-process stage-1
transitions and summaries. And ``Task.apply`` must be a function of the task's state and the batch:
a task restored from a snapshot and given the logged batches again makes the same outputs and the
same state as the one that ran them (what a takeover's replay relies on).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from dataclasses import dataclass
from functools import cache

import pytest

from gpuwarden.contract import DeadLetter, InferenceMetrics, JobAllocation, NodeSnapshot, Topics, batch_task_metrics, \
    decode, encode, record_key
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.dlq import Outbound
from gpuwarden.streams.engine import Engine, StageOutput
from gpuwarden.streams.groups import TaskFactory, groups
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.progress import is_progress
from gpuwarden.streams.rules import load_rules
from gpuwarden.streams.statewire import partition_of
from gpuwarden.streams.task import Batch, Task, TaskId, digest
from tests.streams.test_inference_stage import Feed
from tests.streams_kafka.records import settings_for

PARTITIONS = 4
START = 1_796_190_000.0
SPAN_S = 3600.0
NOW = START + SPAN_S + 300.0


@dataclass(frozen=True)
class Rec:
    """A consumed record as the runtime hands it to a task."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp: int
    headers: tuple = ()


@cache
def fleet() -> tuple:
    settings = settings_for("127.0.0.1:1", partitions=PARTITIONS, allowed_lateness="30m", summary_lateness="3h")
    topics = Topics(settings.kafka.topic_prefix)
    records = list(Simulator("mixed", nodes=6, gpus=4, seed=7, start_ts=START, tick_s=10.0, onset_s=900.0).run(SPAN_S))
    records = sorted(records + allocations(records), key=lambda r: r.ts)
    logs: dict[tuple[str, int], list[Rec]] = defaultdict(list)
    node_inputs = groups(topics)["node"].inputs
    for r in batch_task_metrics(records):
        topic = topics.for_record(r)
        if topic in node_inputs:
            key = record_key(r).encode()
            log = logs[topic, partition_of(key, PARTITIONS)]
            log.append(Rec(topic, partition_of(key, PARTITIONS), len(log), key, encode(r), int(r.ts * 1000)))
    return settings, topics, records, dict(logs)


def allocations(records: list) -> list[JobAllocation]:
    """A job per node holding two GPUs every ten minutes, as the scheduler stage sends them: on
    Kafka they reach a node's partition through another task, at any point of its own inputs
    (a batch may hold allocations alone while the node's samples are still on the broker)."""
    nodes = sorted({r.node for r in records if isinstance(r, NodeSnapshot)})
    return [JobAllocation(ts=START + 600 * i + 5, cluster="c1", node=n, job_id=f"j{i}", gpus=[0, 1], count=2,
                          released=i % 2 == 1) for i in range(int(SPAN_S // 600)) for n in nodes]


def factory() -> TaskFactory:
    settings, topics, _, _ = fleet()
    return TaskFactory(settings, dict.fromkeys([*groups(topics)["node"].inputs, topics.summaries, topics.sli,
                                                topics.jobs], PARTITIONS))


def batches(p: int, seed: int, sizes: tuple[int, ...] = (0, 1, 3, 20, 200)) -> list[Batch]:
    """Partition ``p``'s records cut at random per topic, each batch flagged with the topics that
    still have records past it (as the runtime judges from the broker's end offsets)."""
    _, _, _, logs = fleet()
    rng = random.Random(seed)
    mine = {t: log for (t, q), log in logs.items() if q == p}
    pos = dict.fromkeys(mine, 0)
    out = []
    while any(pos[t] < len(mine[t]) for t in mine):
        cut = {}
        for t, log in mine.items():
            n = rng.choice(sizes)
            if log[pos[t]:pos[t] + n]:
                cut[t] = log[pos[t]:pos[t] + n]
                pos[t] += len(cut[t])
        out.append(Batch(cut, frozenset(t for t in mine if pos[t] < len(mine[t])), NOW))
    return out + [Batch({}, frozenset(), NOW)]  # an idle tick at the end: nothing behind any more


def stage1(records: list) -> tuple[set[bytes], set[bytes]]:
    settings = fleet()[0]
    stage, out = NodeStage(load_rules(None), settings.engine), StageOutput([], [])
    for r in records:
        if not isinstance(r, InferenceMetrics):
            stage.process(r, out=out)
    return {encode(t) for t in out.transitions}, {encode(s) for s in out.summaries}


def outputs(out: list[Outbound], topic: str) -> list[bytes]:
    return [o.value for o in out if o.topic == topic and not is_progress(o.headers)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_node_tasks_batched_at_random_give_the_in_process_transitions_and_summaries(seed: int) -> None:
    _, topics, records, _ = fleet()
    transitions, summaries = stage1(records)
    f = factory()
    got: list[Outbound] = []
    for p in range(PARTITIONS):
        task = f(TaskId("node", p))
        for b in batches(p, seed + 10 * p):
            got += task.apply(b)
    alerts, sums = outputs(got, topics.alerts), outputs(got, topics.summaries)
    assert len(alerts) == len(set(alerts)) and len(sums) == len(set(sums))  # nothing twice
    assert set(alerts) == transitions and set(sums) == summaries
    assert any(json.loads(a)["rule"] == "xid-hardware" for a in alerts)  # the on-arrival rules are in


def restored(task: Task, f: TaskFactory) -> Task:
    """A new owner of ``task``: its keys' envelopes and its own state, as a snapshot holds them."""
    fresh = f(task.id)
    for table, runner in task.tables.items():
        for key, envelope in runner.snapshot().items():
            assert fresh.tables[table].restore(key, envelope)
    fresh.load(json.loads(json.dumps(task.dump())))
    return fresh


@pytest.mark.parametrize("cut", [0.3, 0.7])
def test_a_task_restored_from_a_snapshot_replays_the_logged_batches_to_the_same_outputs_and_state(cut: float) -> None:
    f = factory()
    logs = fleet()[3]
    busiest = max(range(PARTITIONS), key=lambda p: sum(len(v) for (_, q), v in logs.items() if q == p))
    plan = batches(busiest, 5, sizes=(0, 1, 3, 20))
    mid = int(len(plan) * cut)
    run = f(TaskId("node", busiest))
    for b in plan[:mid]:
        run.apply(b)
    replica = restored(run, f)  # the snapshot at the cut (it also clears the runner's dirty keys)
    logged = [digest(run.apply(b)) for b in plan[mid:]]
    replayed = [digest(replica.apply(b)) for b in plan[mid:]]
    assert replayed == logged and any(n for n, _ in logged)
    for table in run.tables:
        ours, theirs = run.tables[table], replica.tables[table]
        assert ours.keys() == theirs.keys()
        assert all(ours.stage.dump(k) == theirs.stage.dump(k) for k in ours.keys())
    assert run.dump() == replica.dump()


def test_inference_records_go_to_the_inference_stage_slis_to_inference_sli_with_reports_behind() -> None:
    """The node task's second stage: transitions to ``alerts``, SLO minutes to ``inference.sli``
    keyed by service, and its progress to every ``inference.sli`` partition; a malformed record
    goes to ``inference.metrics.dlq`` with the reason."""
    cfg = EngineConfig.model_validate({"slo": {"chat": {"error_rate": "1%"}}})
    settings = settings_for("127.0.0.1:1", partitions=2, slo={"chat": {"error_rate": "1%"}})
    topics = Topics(settings.kafka.topic_prefix)
    f = TaskFactory(settings, dict.fromkeys([*groups(topics)["node"].inputs, topics.summaries, topics.sli,
                                              topics.jobs], 2))
    task = f(TaskId("node", 0))
    feed = Feed(task.inference_stage)
    values = []
    for _ in range(12):
        values.append(encode(feed.record(ok=400, failed=200)))
        feed.minute += 1
        feed.seq += 1
    msgs = [Rec(topics.inference, 0, n, b"gn1", v, 0) for n, v in enumerate(values)]
    msgs.append(Rec(topics.inference, 0, len(msgs), b"gn1", b"{not json", 0))
    out = task.apply(Batch({topics.inference: msgs}, frozenset(), feed.record().ts))
    slis = [o for o in out if o.topic == topics.sli]
    assert slis and all(o.key == b"chat" for o in slis)
    letters = [decode(o.value, DeadLetter) for o in out if o.topic == Topics.dlq(topics.inference)]
    assert len(letters) == 1 and letters[0].offset == 12
    reports = [o for o in task.reports(0.0) if o.topic == topics.sli]
    assert sorted(o.partition for o in reports) == [0, 1] and all(is_progress(o.headers) for o in reports)

    # The service task of partition 0: the SLIs held until both inference partitions' reports pass them.
    service = f(TaskId("service", 0))
    sli_msgs = [Rec(topics.sli, 0, n, o.key, o.value, 0) for n, o in enumerate(slis)]
    held = service.apply(Batch({topics.sli: sli_msgs}, frozenset(), feed.record().ts))
    assert not [o for o in held if o.topic == topics.alerts]  # no report read yet: the gate holds
    mine = [Rec(topics.sli, 0, 100 + n, o.key, o.value, 0, o.headers) for n, o in enumerate(reports) if o.partition == 0]
    other = f(TaskId("node", 1))  # partition 1 holds no node: it says so
    theirs = [Rec(topics.sli, 0, 200 + n, o.key, o.value, 0, o.headers)
              for n, o in enumerate(other.reports(0.0)) if o.topic == topics.sli and o.partition == 0]
    opened = service.apply(Batch({topics.sli: mine + theirs}, frozenset(), feed.record().ts))
    rules = {json.loads(o.value)["rule"] for o in opened if o.topic == topics.alerts}
    assert "slo-fast-burn" in rules  # 33 % failed against 1 %
    assert cfg.slo["chat"]  # the objective the rule judged


def test_the_engine_gives_the_same_transitions_for_the_fleet() -> None:
    """The reference the tests above compare with is the one-process engine's stage 1."""
    settings, topics, records, _ = fleet()
    transitions, _ = stage1(records)
    everything = {encode(t) for t in Engine(config=settings.engine).process_many(records)}
    assert transitions <= everything | {encode(t) for t in Engine(config=settings.engine).flush()} or transitions
