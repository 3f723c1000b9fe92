"""The broker SIGKILLed for 60 s under traffic with a stream worker running: nothing lost, a quiet log.

Its own broker (``kafka-local kill``/``restart``, same port and data). The agent's spool-first
``Publisher`` sends the simulated ``mixed`` fleet (event time ~40x wall time) to a ``gpuwarden
streams`` worker at the default log level; the broker is killed mid-stream and restarted 60 s later.
Expected (issue #29): the worker is still running, its group's committed offsets reach the end
offsets, the ``alerts`` topic read committed holds exactly ``Engine.process_many`` of the records,
none twice; during the outage the worker's log has at most one line per 10 s, and so has the
publisher's (this process), and each says when Kafka is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from pathlib import Path

import pytest

from gpuwarden import outage
from gpuwarden.contract import Topics, encode
from gpuwarden.producers.publisher import Publisher
from gpuwarden.producers.simulator import Simulator
from gpuwarden.spool import Spool
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.groups import groups
from gpuwarden.streams.statewire import app_id
from tests.kafka_support import OwnBroker
from tests.reliability.exactness import at_the_end, compare
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.workers import Worker, group_members, read_to_end, wait_for, write_config

pytestmark = [pytest.mark.kafka, pytest.mark.long]

PARTITIONS = 2
OUTAGE_S = 60.0


def stamped(line: str) -> float | None:
    try:
        return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


async def test_a_minute_without_the_broker_loses_nothing_and_logs_a_line_per_10_s(
        own_broker: OwnBroker, tmp_path: Path, caplog: pytest.LogCaptureFixture, reliability_report) -> None:
    bootstrap = own_broker.bootstrap
    settings = settings_for(bootstrap, partitions=PARTITIONS, allowed_lateness="30m", summary_lateness="3h")
    topics = Topics(settings.kafka.topic_prefix)
    sim = Simulator("mixed", nodes=2, gpus=4, seed=9, start_ts=time.time() - 3 * 3600, tick_s=10.0, onset_s=600)
    steps = [sim.step() for _ in range(3 * 360)]
    want = transition_ids([encode(t) for t in Engine(config=settings.engine).process_many(
        [r for s in steps for r in s])])
    assert len(want) >= 5
    group = app_id(settings)
    inputs = sorted({t for g in groups(topics).values() for t in g.inputs})
    worker = Worker(write_config(tmp_path / "gpuwarden.yaml", settings), "w1", tmp_path, verbose=False)
    gate = outage.KafkaLogGate()  # as the CLI installs it on its handlers
    caplog.handler.addFilter(gate)
    caplog.set_level(logging.WARNING)
    killed_at = back_at = 0.0
    try:
        async def joined() -> bool:
            return await group_members(bootstrap, group) == 1

        await wait_for(joined, "the worker in its group")
        with Spool(tmp_path / "agent.db") as spool:
            agent = Publisher(spool, bootstrap, topics, send_timeout_s=3.0, partitions=PARTITIONS)
            try:
                for n in range(0, len(steps), 9):  # 90 s of event time every 0.25 s of wall time
                    for s in steps[n:n + 9]:
                        agent.submit(s)
                    await agent.pump()
                    if n == 9 * 40:
                        own_broker.run("kill")
                        killed_at = time.time()
                    if killed_at and not back_at and time.time() - killed_at >= OUTAGE_S:
                        await asyncio.to_thread(own_broker.run, "restart")
                        back_at = time.time()
                    await asyncio.sleep(0.25)
                while not back_at:
                    await asyncio.sleep(1.0)
                    if time.time() - killed_at >= OUTAGE_S:
                        await asyncio.to_thread(own_broker.run, "restart")
                        back_at = time.time()
                end = time.monotonic() + 600  # a bound for a drain that never ends, not a figure
                while spool.pending_count(topics.all()) and time.monotonic() < end:
                    if not await agent.pump():
                        await asyncio.sleep(0.5)
                assert spool.pending_count(topics.all()) == 0 and agent.failures > 0
            finally:
                await agent.close()

        lag, _ = await at_the_end(bootstrap, group, inputs, PARTITIONS, time.monotonic(), 120)
        assert lag == 0, lag
        got = transition_ids([r.value for r in await read_to_end(bootstrap, topics.alerts, PARTITIONS)])
        assert worker.alive(), worker.tail()
    finally:
        worker.stop()
        caplog.handler.removeFilter(gate)

    lines = worker.log.read_text(errors="replace").splitlines()
    during = [line for line in lines if (t := stamped(line)) is not None and killed_at <= t <= back_at]
    ours = [r for r in caplog.records if killed_at <= r.created <= back_at]
    missing, extra, twice = compare(want, got)
    reliability_report(f"broker SIGKILLed for {OUTAGE_S:.0f} s under traffic, a stream worker running", injected=1,
                       lost=len(missing), detail=f"{len(want)} transitions expected, {len(got)} read committed, "
                       f"{len(extra)} unexpected, {len(twice)} twice; during the outage {len(during)} worker log lines, "
                       f"{len(ours)} publisher lines")
    assert not missing and not extra and not twice, (sorted(missing)[:3], sorted(extra)[:3], twice[:3])
    budget = (back_at - killed_at) // outage.SPACING_S + 1  # kill to restarted: 60 s and the broker's start
    assert len(during) <= budget, during
    assert len(ours) <= budget, [r.getMessage() for r in ours]
    assert any("Kafka reachable again" in line for line in lines), lines[-20:]
