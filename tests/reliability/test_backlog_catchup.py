"""A 2-hour backlog of 8 nodes × 8 GPUs read from scratch with the default settings gives exactly the
in-process Engine's transitions, stage 2 included.

The workers start once every record is on the broker (the normal state after an outage or a
deploy). Partitions hold different numbers of nodes, so stage 1 gets through some nodes' backlog
hours of event time before others', and their summaries reach stage 2 that far apart. With the
default ``engine.summary_lateness`` (5 min) stage 2 took the lagging nodes for gone and applied
their summaries late: ``version-skew`` flapped (issue #15, defect 3). Stage 1 now marks the
summaries it makes while its inputs are behind, and stage 2 waits for such contributors.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from gpuwarden.contract import TaskSummary, Topics, decode, encode
from gpuwarden.kafka import produce_records
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from tests.kafka_support import create_topic
from tests.streams_kafka.records import T0, settings_for, transition_ids
from tests.streams_kafka.workers import read_to_end, wait_for, workers, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SPAN_S = 2 * 3600.0


#: Open (issue #15): with two workers the group rebalances while they catch up, and in 1 of the
#: 7 runs so far (the full suite in a clean clone, both cores busy) version-skew flapped once
#: (2 extra transitions). Stage 2 waits only for nodes it has already heard from, and a moved
#: node's gap is not stamped (docs/engine.md, "Catching up"); per-partition progress from
#: stage 1 to stage 2 is the fix still to build. Alone it passed 6 of 6.
TWO_WORKERS_OPEN = pytest.mark.xfail(strict=False, reason="issue #15: stage 2 across a rebalance while catching up")


@pytest.mark.parametrize("n_workers", [1, pytest.param(2, marks=TWO_WORKERS_OPEN)])
async def test_two_hour_backlog_from_scratch_gives_the_in_process_transitions(
    kafka_bootstrap: str, tmp_path: Path, n_workers: int, reliability_report
) -> None:
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS)  # default lateness (30 s, 5 min)
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.alerts):
        await create_topic(kafka_bootstrap, t, partitions=PARTITIONS)
    sim = Simulator("mixed", nodes=8, gpus=8, seed=3, start_ts=T0, tick_s=10.0, onset_s=1800.0)
    records = list(sim.run(SPAN_S))
    engine = Engine(config=settings.engine)
    reference = [encode(t) for t in engine.process_many(records)]  # a live worker never flushes
    expected = set(transition_ids(reference))
    rules = {json.loads(b)["rule"] for b in reference}
    assert "version-skew" in rules, rules  # the stage-2 rule that flapped
    await produce_records(records, {"bootstrap_servers": kafka_bootstrap}, topics.prefix)

    async def alerts() -> list[tuple[str, str, float]]:
        return transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])

    async def done() -> bool:
        assert all(w.alive() for w in started), [w.tail() for w in started]
        sums = await read_to_end(kafka_bootstrap, topics.summaries, PARTITIONS)
        return len({(s.node, s.task_id, s.ts) for s in (decode(r.value, TaskSummary) for r in sums)}) \
            >= engine.summaries and expected <= set(await alerts())

    ids = [f"w{i + 1}" for i in range(n_workers)]
    with workers(write_config(tmp_path / "gpuwarden.yaml", settings), tmp_path, *ids) as started:
        try:
            await wait_for(done, 180, "every summary and expected transition", poll=2)
        except TimeoutError:
            pass  # the assertions below say what is missing
        await asyncio.sleep(2.0)  # a last fetch's outputs (extra transitions come with the others)
        got = await alerts()
        assert all(w.alive() for w in started), [w.tail() for w in started]

    missing, extra = expected - set(got), set(got) - expected
    reliability_report(f"2 h backlog (8 nodes x 8 GPUs) read from scratch, {n_workers} worker(s)",
                       injected=0, lost=len(missing),
                       detail=f"{len(records)} records, {len(expected)} expected transitions, {len(got)} on the "
                              f"topic, {len(extra)} unexpected")
    assert not missing, sorted(missing)[:5]
    assert not extra, sorted(extra)[:5]
