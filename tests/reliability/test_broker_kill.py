"""The Kafka broker SIGKILLed and restarted under load: no sample and no alert lost.

Its own broker (``KAFKA_LOCAL_DIR=<tmp>``): ``kafka-local kill`` mid-stream, the
producers keep going (spool-first), ``kafka-local restart`` brings the broker back
on the same port and data. Producers: the agent's Publisher with the simulated
``mixed`` fleet, and the engine's alert transitions through a second spool-first
Publisher (as a worker's output would be). After the restart everything is read
back: every (boot_id, seq) of every node exactly once after dedup, every alert
transition present, and the engine run over the records read back from Kafka
gives exactly the transitions of the engine run on the original records. The
alerts read back (redelivered duplicates included) then go through the real
Notifier: it notifies each transition exactly as often as for the reference
transitions without duplicates (dedup by fingerprint, state and started_at).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter

import pytest

from gpuwarden.contract import Topics, batch_task_metrics, decode, encode, unbatch
from gpuwarden.spool import Spool
from gpuwarden.producers.publisher import Publisher
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.engine import Engine
from tests.kafka_support import OwnBroker, consume_all, create_topic
from tests.reliability.notify_support import notify

pytestmark = pytest.mark.kafka


def ids(transitions) -> list[tuple[str, str, float]]:
    return [(t.fingerprint, t.state, t.started_at) for t in transitions]


async def test_broker_killed_under_load_loses_nothing(own_broker: OwnBroker, tmp_path, monkeypatch, reliability_report,
                                                     kafka_report):
    bootstrap = own_broker.bootstrap
    topics = Topics(prefix=f"kill-{uuid.uuid4().hex[:8]}.")
    for t in (topics.samples, topics.events, topics.metrics, topics.inference, topics.alerts):
        await create_topic(bootstrap, t)
    sim = Simulator("mixed", nodes=2, gpus=4, seed=9, start_ts=time.time() - 3 * 3600, tick_s=10.0, onset_s=600)
    steps = [sim.step() for _ in range(3 * 360)]
    reference = Engine()
    per_step = [reference.process_many(s) for s in steps]
    reference_trs = [t for ts in per_step for t in ts] + reference.flush()
    expected = ids(reference_trs)
    assert len(expected) >= 5
    records = [r for s in steps for r in batch_task_metrics(s)]  # as the publisher sends each tick

    with Spool(tmp_path / "agent.db") as agent_spool, Spool(tmp_path / "alerts.db") as alert_spool:
        agent = Publisher(agent_spool, bootstrap, topics, send_timeout_s=3.0)
        alerts = Publisher(alert_spool, bootstrap, topics, send_timeout_s=3.0)
        chunks = [range(i, min(i + 36, len(steps))) for i in range(0, len(steps), 36)]
        waiting = 0
        try:
            for n, chunk in enumerate(chunks):
                for i in chunk:
                    agent.submit(steps[i])
                    alerts.submit(per_step[i])
                await agent.pump()
                await alerts.pump()
                if n == len(chunks) // 3:
                    own_broker.run("kill")
                if n == 2 * len(chunks) // 3:
                    waiting = agent_spool.pending_count() + alert_spool.pending_count()
                    await asyncio.to_thread(own_broker.run, "restart")
                await asyncio.sleep(0.3)
            end = time.monotonic() + 600  # a bound for a drain that never ends, not a figure
            while (agent_spool.pending_count() or alert_spool.pending_count()) and time.monotonic() < end:
                if not await agent.pump() + await alerts.pump():
                    await asyncio.sleep(0.5)
            assert agent_spool.pending_count() == alert_spool.pending_count() == 0
        finally:
            await agent.close()
            await alerts.close()
    assert waiting > 0 and agent.failures > 0, "the outage must have held records back"

    counts = Counter(topics.for_record(r) for r in records)
    got = {t: await consume_all(bootstrap, t, expected=counts[t])
           for t in (topics.samples, topics.events, topics.metrics, topics.inference, topics.jobs)}
    alert_values = await consume_all(bootstrap, topics.alerts, expected=len(expected))
    back = [decode(r.value) for t in got for r in got[t]]
    unique = {encode(r): r for r in back}
    assert set(unique) == {encode(r) for r in records}, "every record arrived (duplicates allowed, at-least-once)"
    seen_alerts = {(d["fingerprint"], d["state"], d["started_at"])
                   for d in (json.loads(r.value) for r in alert_values)}
    assert seen_alerts == set(expected), "every alert transition arrived"
    downstream = Engine()
    replayed = ids(downstream.process_many(sorted(unbatch(unique.values()), key=lambda r: r.ts)) + downstream.flush())
    assert sorted(replayed) == sorted(expected), "the records read back give the same alerts"
    dup_records = len(back) - len(unique)
    reference_notes, _, _, _ = await notify(sorted(reference_trs, key=lambda t: t.ts), tmp_path / "ref", monkeypatch)
    read_back = sorted((decode(r.value) for r in alert_values), key=lambda t: t.ts)
    notes, _, _, _ = await notify(read_back, tmp_path / "got", monkeypatch)
    duplicates = sum(max(0, n - reference_notes.get(k, 0)) for k, n in notes.items())
    assert reference_notes and duplicates == 0 and set(notes) == set(reference_notes)
    reliability_report("Kafka broker SIGKILL + restart under load", lost=len(set(map(encode, records)) - set(unique)),
                       duplicates=duplicates,
                       detail=f"{len(records)} records + {len(expected)} alert transitions; {waiting} waited in "
                              f"spools during the outage; {dup_records} redelivered duplicates dropped by "
                              f"(boot_id, seq); engine over read-back records = reference; {len(alert_values)} alert "
                              f"records read back → {sum(notes.values())} notifications, as for the reference")
    kafka_report(f"broker kill: {len(back)} records and {len(alert_values)} alerts read back via {bootstrap}")
