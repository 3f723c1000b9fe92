"""Clock skew between nodes, at the stream workers' boundary and in the engine.

Documented behaviour (docs/reliability.md): a record more than
``limits.max_future_skew`` (5 min) ahead of the worker's clock is rejected by the
contract and dead-lettered with the reason; a node whose clock is behind is
handled on its own event time (the reorder buffer and watermark are per node),
so a node 2 min behind gets the same alerts, 2 min earlier, and nothing is late.
"""

from __future__ import annotations

import base64
import json
import time

from gpuwarden.contract import ContractError, DeadLetter, InferenceMetrics, batch_task_metrics, decode, encode, record_key
from gpuwarden.producers.simulator import Simulator
from gpuwarden.streams.dlq import Inbound, Limits, decode_inbound, to_dlq
from gpuwarden.streams.engine import Engine

AHEAD_S, BEHIND_S = 600.0, 120.0


def shifted(record, by: float):
    update = {"ts": record.ts + by}
    if isinstance(record, InferenceMetrics):  # a scrape interval moves with its clock
        update["start_ts"] = record.start_ts + by
    return record.model_copy(update=update)


def test_node_ten_minutes_ahead_is_dead_lettered_with_the_reason(reliability_report):
    now = time.time()
    sim = Simulator("healthy", nodes=2, gpus=2, start_ts=now - 30, tick_s=10.0)
    records = list(batch_task_metrics(shifted(r, AHEAD_S) if r.node == "sim-node-01" else r
                                      for _ in range(3) for r in sim.step()))  # as the agent sends them
    accepted, letters = 0, []
    for offset, r in enumerate(records):
        msg = Inbound("gpu.samples", 0, offset, record_key(r).encode(), encode(r))
        try:
            decode_inbound(msg, type(r), Limits(), now=now)
            accepted += 1
        except ContractError as e:
            letters.append(to_dlq(msg, str(e)))
    ahead_count = sum(r.node == "sim-node-01" for r in records)
    assert accepted == len(records) - ahead_count and len(letters) == ahead_count
    for out in letters:
        letter = decode(out.value, DeadLetter)
        assert out.topic == "gpu.samples.dlq" and "in the future" in letter.error
        assert json.loads(base64.b64decode(letter.value_b64))["node"] == "sim-node-01"  # the original bytes are kept
    reliability_report("node clock 10 min ahead",
                       detail=f"{ahead_count} records dead-lettered with the reason, {accepted} accepted")


def test_node_two_minutes_behind_gets_the_same_alerts_earlier(reliability_report):
    start = 1_767_225_600.0
    records = list(Simulator("mixed", nodes=2, gpus=4, seed=3, start_ts=start, tick_s=10.0,
                             onset_s=600).run(3 * 3600))
    reference = Engine()
    expected = reference.process_many(records) + reference.flush()
    skewed = Engine()
    # the scheduler's records (no node: the cluster's clock) stay as they are
    got = skewed.process_many(shifted(r, -BEHIND_S) if getattr(r, "node", None) == "sim-node-01" else r
                              for r in records)
    got += skewed.flush()

    def ids(trs, node: str, by: float = 0.0) -> set:
        return {(t.fingerprint, t.state, t.started_at + by) for t in trs if t.labels.get("node") == node}

    assert ids(expected, "sim-node-01"), "the scenario must put alerts on the skewed node"
    # job-straggler compares the job's nodes minute by minute, so the skewed node is compared with
    # its peer's minute 2 min later; its throttle comes and goes, and without the flag's hysteresis
    # (streams/straggler.py, HOLD) it resolved and fired again 8 min later only when skewed
    assert any(t.rule == "job-straggler" for t in expected if t.labels.get("node") == "sim-node-01")
    assert ids(got, "sim-node-01") == ids(expected, "sim-node-01", -BEHIND_S)
    assert ids(got, "sim-node-00") == ids(expected, "sim-node-00")
    assert skewed.counters()["late"] == 0
    reliability_report("node clock 2 min behind",
                       detail=f"{sum(getattr(r, 'node', None) == 'sim-node-01' for r in records)} records skewed, "
                              f"{len(ids(got, 'sim-node-01'))} transitions on the skewed node, same fingerprints, "
                              f"{BEHIND_S:.0f} s earlier; 0 late")
