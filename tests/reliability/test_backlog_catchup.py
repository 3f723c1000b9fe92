"""A 2-hour backlog of 8 nodes × 8 GPUs read from scratch with the default settings gives exactly the
in-process Engine's transitions, stage 2 included.

The workers start once every record is on the broker (the normal state after an outage or a
deploy). Partitions hold different numbers of nodes, so stage 1 gets through some nodes' backlog
hours of event time before others', and their summaries reach stage 2 that far apart. With the
default ``engine.summary_lateness`` (5 min) stage 2 took the lagging nodes for gone and applied
their summaries late: ``version-skew`` flapped (issue #15, defect 3). Stage 1 now reports each
input partition's progress to stage 2, which releases a class's summaries only once every
partition has passed them (docs/engine.md, "The stage-1 watermark"); with two workers the
start-up rebalance moves partitions mid-read too. A task that reported its partition's progress
before its first fetch said "empty" (no nodes, not catching up) of a partition holding a backlog:
with two workers stage 2 then applied two nodes' whole 2 h before the others', and
``job-straggler``, which compares a job's nodes minute by minute, never fired (none of its 4
transitions in each of three runs; now a task's first batch, empty or not, comes first).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gpuwarden.contract import StageProgress, Topics, decode, encode
from gpuwarden.kafka import produce_records
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.progress import is_progress
from tests.kafka_support import create_topic
from tests.reliability.exactness import compare
from tests.streams_kafka.records import T0, settings_for, transition_ids
from tests.streams_kafka.workers import end_offsets, read_summaries, read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SPAN_S = 2 * 3600.0


@pytest.mark.parametrize("n_workers", [1, 2])
async def test_two_hour_backlog_from_scratch_gives_the_in_process_transitions(
    kafka_bootstrap: str, tmp_path: Path, n_workers: int, reliability_report
) -> None:
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS)  # default lateness (30 s, 5 min)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.alerts, topics.jobs,
              topics.allocations):
        await create_topic(kafka_bootstrap, t, partitions=PARTITIONS)
    sim = Simulator("mixed", nodes=8, gpus=8, seed=3, start_ts=T0, tick_s=10.0, onset_s=1800.0)
    records = list(sim.run(SPAN_S))
    engine = Engine(config=settings.engine)
    reference = [encode(t) for t in engine.process_many(records)]  # a live worker never flushes
    expected = set(transition_ids(reference))
    rules = {json.loads(b)["rule"] for b in reference}
    assert "version-skew" in rules, rules  # the stage-2 rule that flapped
    assert "job-straggler" in rules, rules  # compares a job's nodes minute by minute: needs them all in
    await produce_records(records, {"bootstrap_servers": kafka_bootstrap}, topics.prefix,
                          partitions=settings.kafka.partitions)

    async def alerts() -> list[tuple[str, str, float]]:
        values = [r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)]
        return transition_ids(values)

    async def done() -> bool:
        assert all(w.alive() for w in started), [w.tail() for w in started]
        sums = await read_summaries(kafka_bootstrap, topics.summaries, PARTITIONS)
        return len({(s.node, s.task_id, s.ts) for s in sums}) \
            >= engine.summaries and expected <= set(await alerts())

    ids = [f"w{i + 1}" for i in range(n_workers)]
    with workers(write_config(tmp_path / "gpuwarden.yaml", settings), tmp_path, *ids) as started:
        try:
            await wait_for(done, "every summary and expected transition", poll=2)
        except TimeoutError:
            pass  # the assertions below say what is missing
        await asyncio.sleep(2.0)  # a last fetch's outputs (extra transitions come with the others)
        got = await alerts()
        assert all(w.alive() for w in started), [w.tail() for w in started]
        reports = [decode(r.value, StageProgress) for r in await read_to_end(kafka_bootstrap, topics.summaries, PARTITIONS)
                   if is_progress(r.headers)]
        held = {p for p, n in (await end_offsets(kafka_bootstrap, topics.samples, PARTITIONS)).items() if n}

    # A partition holding records never says it is empty (no nodes, not catching up): a task that
    # reported before its first fetch did, and stage 2 applied the other partitions' 2 h first.
    empty = sorted({r.partition for r in reports if r.partition in held and not r.nodes and not r.catching_up})
    assert not empty, f"stage-1 partitions {empty} hold records but reported themselves empty"

    missing, extra, twice = compare(transition_ids(reference), got)  # exactly once: each transaction commits once
    reliability_report(f"2 h backlog (8 nodes x 8 GPUs) read from scratch, {n_workers} worker(s)",
                       injected=0, lost=len(missing),
                       detail=f"{len(records)} records, {len(expected)} expected transitions, {len(got)} on the "
                              f"topic, {len(extra)} unexpected, {len(twice)} twice")
    assert not missing, sorted(missing)[:5]
    assert not extra, sorted(extra)[:5]
    assert not twice, twice[:5]
