"""The scheduler stage in cluster mode, on real Kafka with a `gpuwarden streams` worker: polls on
``scheduler.jobs`` give the fragmentation alert, their allocations reach stage 1 over
``scheduler.allocations`` and, joined with the node's samples, the allocated-but-idle alert; a
malformed scheduler record lands in ``scheduler.jobs.dlq`` with its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.contract import JobState as S, StageProgress, Topics, decode, encode
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.progress import is_progress
from gpuwarden.streams.statewire import partition_of
from tests.kafka_support import consume_all, create_topic, produce
from tests.streams.sched_records import CLUSTER, job, node, poll, samples
from tests.streams_kafka.records import T0, keyed, settings_for, transition_ids
from tests.streams_kafka.workers import read_summaries, read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka


async def _topics(bootstrap: str, settings: Any, jobs_partitions: int = 2) -> Topics:
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.jobs, topics.allocations):
        await create_topic(bootstrap, t, partitions=jobs_partitions if t == topics.jobs else 2)
    return topics


def _job_77(fragmented: bool) -> tuple[list[Any], list[Any]]:
    """10 min of polls and node-00's samples: job 77 holds its 8 GPUs and uses 2; ``fragmented``:
    jobs 1 and 2 hold 2 GPUs each of gn1 and gn2 while job 3 waits for 4 on one node."""
    polls, snaps = [], []
    for k in range(0, 600, 5):
        ts = T0 + k
        snaps.append(samples("node-00", ts, k, {0: 90.0, 1: 80.0}, "77"))
        if k % 30 == 0:
            jobs = [job("77", S.RUNNING, ts, gpus=8, start=T0 - 5, alloc={"node-00": list(range(8))})]
            nodes = [node("node-00", ts, 8, 8)]
            if fragmented:
                jobs += [job("1", S.RUNNING, ts, gpus=2, start=T0 - 5, alloc={"gn1": [0, 1]}),
                         job("2", S.RUNNING, ts, gpus=2, start=T0 - 5, alloc={"gn2": [0, 1]}),
                         job("3", S.PENDING, ts, gpus=4, submit=T0, reason="Resources")]
                nodes += [node("gn1", ts, 4, 2), node("gn2", ts, 4, 2)]
            polls += poll(ts, jobs, nodes)
    return polls, snaps


async def test_scheduler_polls_give_alerts_through_both_stages_and_bad_records_a_dead_letter(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    settings = settings_for(kafka_bootstrap, partitions=2, scheduler={"fragmentation_for": "60s",
                                                                      "unused_for": "120s"})
    topics = await _topics(kafka_bootstrap, settings)
    polls, snaps = _job_77(fragmented=True)
    bad = json.loads(encode(polls[0]))
    bad["gpu_indices"] = {"node-00": ["zero"]}
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    with workers(config, tmp_path, "w1") as (w1,):
        await produce(kafka_bootstrap, topics.jobs, [(CLUSTER.encode(), json.dumps(bad).encode())] + keyed(polls))
        dlq = await consume_all(kafka_bootstrap, Topics.dlq(topics.jobs), expected=1)

        async def allocated() -> bool:
            return bool(await read_to_end(kafka_bootstrap, topics.allocations, 2))

        # As live: the scheduler's allocation reaches stage 1 before the node's later samples (one
        # that comes after them, from a backlog, applies from its arrival: docs/scheduler.md).
        await wait_for(allocated, "the job allocations")
        await produce(kafka_bootstrap, topics.samples, keyed(snaps))

        seen: set[str] = set()

        async def alerted() -> bool:
            seen.update(json.loads(r.value)["rule"] for r in await read_to_end(kafka_bootstrap, topics.alerts, 2))
            return {"scheduler-fragmentation", "job-gpus-unused"} <= seen

        try:
            await wait_for(alerted, "the scheduler alerts")
        except TimeoutError as e:
            raise AssertionError(f"{e}; alerts seen: {sorted(seen)}\n{w1.tail()}") from None
        assert w1.alive(), w1.tail()
    letter = json.loads(dlq[0].value)
    assert letter["topic"] == topics.jobs and "gpu_indices" in letter["error"]
    alerts = [json.loads(r.value) for r in await read_to_end(kafka_bootstrap, topics.alerts, 2)]
    unused = next(a for a in alerts if a["rule"] == "job-gpus-unused")
    assert unused["labels"]["job"] == "77" and unused["evidence"]["values"] == {"allocated": 8.0, "busy": 2.0,
                                                                                "idle": 6.0}
    frag = next(a for a in alerts if a["rule"] == "scheduler-fragmentation")
    assert frag["labels"]["job"] == "3" and frag["evidence"]["note"] == "gn1: 2 free, gn2: 2 free"
    records = await read_to_end(kafka_bootstrap, topics.allocations, 2)
    allocs = [r for r in records if not is_progress(r.headers)]
    assert {r.key for r in allocs} == {b"node-00", b"gn1", b"gn2"}
    # behind them, the scheduler stage's progress on both scheduler.jobs partitions, to both
    # scheduler.allocations partitions (stage 1's allocation join waits for it)
    reports = [decode(r.value, StageProgress) for r in records if is_progress(r.headers)]
    assert {r.partition for r in reports} == {0, 1}
    assert (partition_of(CLUSTER.encode(), 2), polls[-1].ts) in {(r.partition, r.watermark) for r in reports}


@pytest.mark.parametrize("jobs_partitions", [2, 1])
async def test_allocations_behind_a_backlog_of_samples_give_the_in_process_transitions(
        kafka_bootstrap: str, tmp_path: Path, jobs_partitions: int) -> None:
    """The node's samples are read first (a backlog), the scheduler's polls after: stage 1 holds
    ``job-gpus-unused`` until the scheduler stage's progress has passed each instant, so the
    alert is exactly the one-process Engine's (before the watermark, the allocation applied from
    its arrival, after the last sample: no alert at all). With ``scheduler.jobs`` of one partition
    (auto-created) the gate waits for that one."""
    # summary_lateness: how long stage 1 waits for a scheduler it has not heard from (its topic empty)
    settings = settings_for(kafka_bootstrap, partitions=2, summary_lateness="30m", scheduler={"unused_for": "120s"})
    topics = await _topics(kafka_bootstrap, settings, jobs_partitions)
    polls, snaps = _job_77(fragmented=False)
    engine = Engine(config=settings.engine)
    want = transition_ids([encode(t) for t in engine.process_many(sorted([*polls, *snaps], key=lambda r: r.ts))
                           if t.rule == "job-gpus-unused"])
    assert [s for _, s, _ in want] == ["firing"]
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    with workers(config, tmp_path, "w1") as (w1,):
        await produce(kafka_bootstrap, topics.samples, keyed(snaps))

        async def summarised() -> bool:  # stage 1 has been through the samples
            return len(await read_summaries(kafka_bootstrap, topics.summaries, 2)) >= 9

        await wait_for(summarised, "the samples' summaries")
        await produce(kafka_bootstrap, topics.jobs, keyed(polls))

        async def unused() -> list[tuple[str, str, float]]:
            return [i for r in await read_to_end(kafka_bootstrap, topics.alerts, 2)
                    for i in transition_ids([r.value]) if json.loads(r.value)["rule"] == "job-gpus-unused"]

        async def alerted() -> bool:
            return bool(await unused())

        try:
            await wait_for(alerted, "job-gpus-unused")
        except TimeoutError:
            pass  # the assertion below says what came
        assert w1.alive(), w1.tail()
        assert await unused() == want, w1.tail()
