"""A stream worker frozen mid-run comes back as a zombie: nothing it does after its tasks moved is seen.

aiokafka's ``send_offsets_to_transaction`` carries only the group id (aio-libs/aiokafka#844: no
generation check, as KIP-447 gives the JVM), so the broker does not refuse a commit from a member
the group has already thrown out. What keeps such a *zombie* out is the per-task transactional id:
the new owner's producer start fences the old one, and the new owner reads the committed offsets
only after that (``streams/commit.py``). This test makes the case on a real broker: of 2 workers,
one is SIGSTOPped while it processes (open transactions and all) for longer than the session
timeout, so the group hands its tasks to the other, which restores them and carries on; then it is
SIGCONTed and finds out from its next commit or heartbeat. Expected: the ``alerts`` topic read
committed equals the in-process engine's transitions (0 lost, 0 unexpected, 0 twice) and the
group's committed offsets reach the end offsets; the zombie lives on and rejoins.
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from pathlib import Path

import pytest

from gpuwarden.contract import Topics, encode
from gpuwarden.kafka import produce_records
from gpuwarden.producers.servingsim import SLO, SERVICES
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.groups import groups
from gpuwarden.streams.runtime import SESSION_TIMEOUT_S
from gpuwarden.streams.statewire import app_id
from tests.reliability.exactness import CAUGHT_UP_BOUND_S, at_the_end, check_caught_up, compare
from tests.reliability.test_random_kills import CHUNK_S, PARTITIONS, chunks
from tests.streams_kafka.records import settings_for, transition_ids
from tests.streams_kafka.workers import Worker, group_members, group_state, read_to_end, troubles, wait_for, write_config

pytestmark = pytest.mark.kafka

SPAN_S = 3600.0
PACE_S = 2.5  # wall time per 5-minute chunk
FROZEN_S = SESSION_TIMEOUT_S * 2.5  # past the session timeout and the takeover's restore
FREEZE_AT = 4  # chunks produced before the freeze


async def test_a_frozen_worker_that_wakes_after_its_tasks_moved_changes_nothing(
    kafka_bootstrap: str, tmp_path: Path, reliability_report
) -> None:
    slo = {service: SLO for service in SERVICES.values()}
    settings = settings_for(kafka_bootstrap, partitions=PARTITIONS, allowed_lateness="30m",
                            summary_lateness="3h", slo=slo)
    topics = Topics(settings.kafka.topic_prefix)
    sim = Simulator("mixed", nodes=8, gpus=4, seed=5, start_ts=time.time() - SPAN_S - 600, tick_s=10.0,
                    onset_s=600.0)
    records = list(sim.run(SPAN_S))
    want = transition_ids([encode(t) for t in Engine(config=settings.engine).process_many(records)])
    assert want  # not unique: an alert whose cause changed is sent again under its id (compare counts)
    parts = chunks(records)
    assert CHUNK_S * len(parts) >= SPAN_S
    config = write_config(tmp_path / "gpuwarden.yaml", settings)
    group = app_id(settings)
    inputs = sorted({t for g in groups(topics).values() for t in g.inputs})
    zombie, other = Worker(config, "zombie", tmp_path), Worker(config, "other", tmp_path)
    thawed_at = None
    try:
        async def members(n: int) -> bool:
            return await group_members(kafka_bootstrap, group) == n

        async def stable() -> bool:  # both joined and given their tasks (a member mid-join counts as one)
            return await group_state(kafka_bootstrap, group) == ("Stable", 2)

        async def zombie_working() -> bool:
            return "first fetch" in zombie.log.read_text(errors="replace")

        await wait_for(stable, "2 workers in a stable consumer group")
        for i, chunk in enumerate(parts):
            await produce_records(chunk, {"bootstrap_servers": kafka_bootstrap}, topics.prefix,
                                  partitions=PARTITIONS)
            if i == FREEZE_AT:  # mid-run: its tasks restored, records in flight, transactions open
                await wait_for(zombie_working, "the worker to be frozen applying records")
                zombie.proc.send_signal(signal.SIGSTOP)
                frozen = time.monotonic()
                await wait_for(lambda: members(1), "the frozen worker out of the group")
                await asyncio.sleep(max(0.0, frozen + FROZEN_S - time.monotonic()))
                # what the other worker restored and committed since: the zombie's open work is stale
                zombie.proc.send_signal(signal.SIGCONT)
                thawed_at = time.monotonic() - frozen
            await asyncio.sleep(PACE_S)
        last = time.monotonic()
        await wait_for(lambda: members(2), "the zombie back in the group")
        lag, caught_up_s = await at_the_end(kafka_bootstrap, group, inputs, PARTITIONS, last, CAUGHT_UP_BOUND_S)
        got = transition_ids([r.value for r in await read_to_end(kafka_bootstrap, topics.alerts, PARTITIONS)])
        assert zombie.alive() and other.alive(), (zombie.tail(), other.tail())
    except BaseException:
        for w in (zombie, other):
            print(f"--- {w.log} (last 40 lines) ---\n{w.tail(40)}")
        raise
    finally:
        for w in (zombie, other):
            if w.alive():
                w.proc.send_signal(signal.SIGCONT)
            w.stop()

    log = zombie.log.read_text(errors="replace")
    taken = sorted(set(re.findall(r"task (\S+) stopped \((ProducerFenced|InvalidProducerEpoch)", log)))
    moved = sorted(set(re.findall(r"task (\S+): committed by another worker meanwhile", log)))
    missing, extra, twice = compare(want, got)
    reliability_report("a stream worker frozen past its session, then woken (zombie)", injected=1,
                       lost=len(missing),
                       detail=f"frozen {thawed_at:.0f} s; on waking, fenced: {taken or 'none'}, found committed by "
                              f"the other: {moved or 'none'}; {len(want)} transitions expected, {len(got)} read "
                              f"committed: {len(missing)} lost, {len(extra)} unexpected, {len(twice)} twice; "
                              f"group lag {lag} at {caught_up_s:.0f} s")
    assert not missing, sorted(missing)[:5]
    assert not extra, sorted(extra)[:5]
    assert not twice, twice[:5]
    check_caught_up(lag, caught_up_s)
    assert not (trouble := troubles(zombie.log, other.log)), trouble
