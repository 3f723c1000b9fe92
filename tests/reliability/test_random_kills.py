"""Stream workers SIGKILLed at random moments, twice per run, several seeded runs: nothing lost.

Two ``gpuwarden streams`` workers share 4 partitions of every topic, so each owns stage-1
(node) and stage-2 (task class) partitions. While the simulated fleet's records are produced
(paced, so the rebalances of a kill and of a restart come while the workers are busy), a
seeded random worker is SIGKILLed at a seeded random moment and started again, twice; the
other takes its partitions over from the changelog. Stage 1 re-emits what it made after its
last checkpoint and stage 2 must still apply every summary once. Expected (issue #15, defect
4): ``task.summaries`` holds exactly the in-process Engine's summaries (same content; copies
allowed) and ``alerts`` exactly its transitions, stage 2's included (redelivered identical
copies allowed: at-least-once).
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.contract import InferenceMetrics, TaskSummary, Topics, decode, encode
from gpuwarden.kafka import produce_records as send_records
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine, StageOutput
from gpuwarden.streams.nodestage import NodeStage
from gpuwarden.streams.statewire import app_id
from tests.kafka_support import create_topic
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.test_failover import CHUNK_S
from tests.streams_kafka.workers import Worker, group_members, read_summaries, read_to_end, wait_for, write_config

pytestmark = pytest.mark.kafka

PARTITIONS = 4
KILLS = 2
SPAN_S = 2 * 3600.0
PACE_S = 1.0  # wall time per 5-min chunk: ~30 s of production, both rebalances of a kill within it


def flat(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested fields as dotted names (``stats.step_time_s``)."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def odd_by_node(odd: set[bytes], expected: set[bytes]) -> list[str]:
    """Per node: how many summaries are missing or other than in-process, their event-time span,
    and the fields that differ (what a failure needs to be traced to the records behind it)."""
    want = {(s.node, s.task_id, s.ts): s for s in (decode(b, TaskSummary) for b in expected)}
    by_node: dict[str, list[TaskSummary]] = {}
    for s in (decode(b, TaskSummary) for b in odd):
        by_node.setdefault(s.node, []).append(s)
    out = []
    for node, got in sorted(by_node.items()):
        fields = sorted({k for s in got if (w := want.get((s.node, s.task_id, s.ts)))
                         for k, v in flat(w.model_dump()).items() if flat(s.model_dump()).get(k) != v})
        out.append(f"{node}: {len(got)} from ts {min(s.ts for s in got)} to {max(s.ts for s in got)} "
                   f"({sorted({s.task_id for s in got})}), differing {fields or 'missing'}")
    return out


def chunks(records: list[Any]) -> list[list[Any]]:
    """Event-time chunks of ``CHUNK_S``, each in ts order across topics (as agents send them)."""
    out: dict[int, list[Any]] = {}
    for r in records:
        out.setdefault(int(r.ts // CHUNK_S), []).append(r)
    return [sorted(c, key=lambda r: r.ts) for _, c in sorted(out.items())]


@pytest.mark.parametrize(("seed", "early"), [(1, ()), (2, ()), (3, ()), (2, (2, 3))],
                         ids=["seed1", "seed2", "seed3", "early"])
async def test_random_kills_lose_no_transition_of_either_stage(
    kafka_bootstrap: str, tmp_path: Path, seed: int, early: tuple[int, ...], reliability_report
) -> None:
    rng = random.Random(seed)
    # Event time runs ~300x faster than wall time: the lateness bounds cover a takeover.
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS, allowed_lateness="30m",
                            summary_lateness="3h")
    topics = Topics(settings.kafka.topic_prefix)
    for t in (topics.samples, topics.events, topics.metrics, topics.summaries, topics.alerts, topics.jobs,
              topics.allocations):
        await create_topic(kafka_bootstrap, t, partitions=PARTITIONS)
    # 8 nodes x 8 GPUs: fetches big enough that a rebalance often lands inside the handler
    sim = Simulator("mixed", nodes=8, gpus=8, seed=7, start_ts=time.time() - SPAN_S - 600, tick_s=10.0,
                    onset_s=900.0)
    records = list(sim.run(SPAN_S))
    engine = Engine(config=settings.engine)
    expected = set(transition_ids([encode(t) for t in engine.process_many(records)]))
    stage1 = StageOutput([], [])
    node_stage = NodeStage(engine.rules, settings.engine)
    for r in records:
        if not isinstance(r, InferenceMetrics):  # stage 1's inputs (the inference stage has its own)
            node_stage.process(r, out=stage1)
    expected_summaries = {encode(s) for s in stage1.summaries}
    parts = chunks(records)
    # From the first chunk on: before the watermark (issue #15) a class could not wait for a node
    # it had never had a summary from, and both workers killed before any checkpoint (seed 2,
    # chunks 2 and 3: the early case) made the restart a backlog read where half the nodes came
    # late to their classes (version-skew resolved and fired again).
    kill_at = sorted(early or rng.sample(range(len(parts) - 2), KILLS))
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    killed: list[str] = []

    def start(worker_id: str) -> Worker:
        """A worker process with its own log and data directory per (re)start."""
        run_dir = tmp_path / f"r{len(killed)}"
        run_dir.mkdir(exist_ok=True)
        return Worker(config, worker_id, run_dir)

    running = {i: start(i) for i in ("w1", "w2")}

    async def both_in_group() -> bool:
        return await group_members(kafka_bootstrap, app_id(settings)) == 2

    async def alerts() -> list[tuple[str, str, float]]:
        return transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])

    async def summaries() -> set[bytes]:
        return {encode(s) for s in await read_summaries(kafka_bootstrap, topics.summaries, PARTITIONS)}

    async def all_alerts() -> bool:
        return expected <= set(await alerts()) and expected_summaries <= await summaries()

    try:
        await wait_for(both_in_group, 60, "two workers in the consumer group")
        for n, chunk in enumerate(parts):
            await send_records(chunk, {"bootstrap_servers": kafka_bootstrap}, topics.prefix)
            await asyncio.sleep(PACE_S)
            if n in kill_at:
                await asyncio.sleep(rng.uniform(0.0, 3.0))
                victim = rng.choice(sorted(running))
                running[victim].kill()
                running[victim].stop()
                killed.append(f"{victim}@chunk{n}")
                running[victim] = start(victim)
        try:
            await wait_for(all_alerts, 150, "every expected transition after the kills", poll=2)
        except TimeoutError:
            pass  # the assertions below say what is missing
        got, got_summaries = await alerts(), await summaries()
        assert all(w.alive() for w in running.values()), [w.tail() for w in running.values()]
    finally:
        for w in running.values():
            w.stop()

    missing, extra = expected - set(got), set(got) - expected
    odd = got_summaries ^ expected_summaries  # a summary missing, or one with other content
    reliability_report(f"stream workers SIGKILLed at random moments (seed {seed})", injected=KILLS,
                       lost=len(missing),
                       detail=f"kills {', '.join(killed)}; {len(records)} records, {len(expected)} expected "
                              f"transitions (stage 1 and 2), {len(got)} on the topic "
                              f"({len(got) - len(set(got))} redelivered), {len(extra)} unexpected; "
                              f"{len(expected_summaries)} summaries, {len(odd)} missing or different")
    assert not odd, odd_by_node(odd, expected_summaries)  # stage 1 made every summary, as in-process
    assert not missing, sorted(missing)[:5]  # nothing lost
    assert not extra, sorted(extra)[:5]  # nothing but the in-process transitions
