"""Engine transitions of every simulator scenario, as recorded golden lines.

Each scenario runs through both engine stages with its records delivered out of order
(within ``allowed_lateness``), some twice, and the state dumped and loaded into a fresh
Engine halfway: so the reorder buffer, dedup, dump/load, windows, summaries and both
stages' rules all shape the output. The lines hold every transition, a digest of stage 1's
task summaries (their stats read most window columns), the counters and a digest of stage
1's state at the halfway dump. ``tests/streams/test_golden.py`` compares the lines with
``tests/fixtures/engine_golden.jsonl``: transitions, summaries and counters as the engine gave
them when last re-recorded (issue #18: median deviation, growth-based memory-leak, SDK checkpoint
buckets out of util summaries, resolve figures; the scheduler scenarios, and mixed, which holds
them, since their stage: session 9), the state digest of state format 12 (tuples kept as tuples; announcements that wait for the node's snapshots, session 13: the xid-79
scenario's correction of a stale-labelled announcement is gone; issue #30: memory-leak judged on
low-utilization buckets and at a 1.5 GiB rise, so mixed's leak on its idle-allocated GPU fires, at 430 s, and
memory-leak's at 520 s, not 670; GPUs' state holds inferred-checkpoint buckets; task metrics waiting in
the reorder buffer carry ``model_mode`` (issue #34), and the allocation note names GPU indices as such;
issue #30, idle while allocated: idle-allocated-gpu counts idleness under the GPU's task and fires at
7.5 min (640 s, was 1900), with idle-allocated-job (attention) beside it, job-gpus-unused's
``unused_for`` is 7.5 min (670 s, was 2020), and GPU windows no longer keep 30 min of
``idle_allocated``, so every stage-1 state digest changed; issue #30, causes re-judged: alert slots
hold the cause stated and when, so the digests of states with a slot changed, and clock-capped's power
is its 10-min mean like its other figures, not a 5-min one; a growth is measured from where it
began, past a start-up ramp, and counts the checkpoints finished since: memory-leak's and mixed's
leak say "from 63.8", and GPUs' checkpoint state keeps the ends, so every stage-1 digest changed; issue #35, straggler detection: summaries
carry the node's slowest GPU's clock, tensor activity, the cause columns and the label ``gpus``, GPU
windows two more columns (``tensor_active``, ``nvlink_down``), so every summaries and stage-1 state
digest changed; job-straggler fires on thermal-throttle (640 s), power-cap, power-limit-lowered and
mixed (460 s: a capped GPU of the 2-node llama-pretrain holds it back) and on the new scenarios
``straggler`` (460 s), ``multinode-checkpoints`` and ``pipeline-parallel`` (quiet); issue #30, SM and tensor activity against the job's own hour: GPU
windows gain ``sm_active`` and summaries carry it (state format 13), so every summaries and stage-1
state digest changed, and the new scenario ``tensor-fallback`` adds its lines (quiet here: its job has
no hour of its own before the 180-s onset); issue #35, the PCIe link: GPU windows gain ``pcie_gen``,
``pcie_width`` and ``pcie_link_frac`` and summaries carry the slowest link's (state format 14), so every
summaries and stage-1 state digest changed, and the new scenario ``straggler-pcie`` adds its lines
(job-straggler on sim-node-01 at 340 s, its cause the link that trained down; communication-bound at
670 s); no other transition changed). A change meant to alter
them re-records it:

    .venv/bin/python tests/streams/golden.py > tests/fixtures/engine_golden.jsonl

``--big`` prints the wider check (8 GPUs, 3 h, both stages' final state) to compare two trees.
"""

from __future__ import annotations

import hashlib
import heapq
import random
import sys
from collections.abc import Callable, Iterator

from gpuwarden.contract import InferenceMetrics, NodeCapacity, SchedulerJob, SchedulerPoll, encode
from gpuwarden.producers.servingsim import MAX_BATCH, SERVICES, SLO
from gpuwarden.producers.simulator import SCENARIOS, Simulator, sim_node
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine

SCHEDULER = (SchedulerJob, NodeCapacity, SchedulerPoll)

START = 1_700_000_000.0
SPAN_S = 90 * 60.0
TICK_S = 5.0


def _delivery(records: list, seed: str) -> list:
    """The records delayed by 0-20 s each (under the 30 s lateness), every 40th sent twice."""
    return [r for _, _, r in _timed(records, seed)]


def _timed(records: list, seed: str) -> list[tuple[float, int, object]]:
    """``_delivery``'s records with their delivery times, in delivery order."""
    rng = random.Random(seed)
    keyed = [(r.ts + 5.0 * rng.randrange(5), n, r) for n, r in enumerate(records)]
    keyed += [(ts + 10.0, n, r) for ts, n, r in keyed[::40]]
    return sorted(keyed, key=lambda k: (k[0], k[1]))


def _feed(engine: Engine, records: list, summary: Callable[[bytes], object], flush: bool = False) -> list[str]:
    """What ``Engine.process`` does per record, with stage 1's summaries hashed on the way
    (inference records go to the inference stage, its SLO events to the service stage; a scheduler
    record goes to the scheduler stage, its job allocations to stage 1)."""
    lines = []
    for r in records:
        if isinstance(r, InferenceMetrics):
            lines += [encode(t).decode() for t in engine.process(r)]
            continue
        if isinstance(r, SCHEDULER):
            trs, allocs = engine.scheduler.process(r)
            lines += [encode(t).decode() for t in trs]
            for a in allocs:
                o = engine.nodes.process(a)
                lines += [encode(t).decode() for t in o.transitions]
                for s in o.summaries:
                    summary(encode(s))
                    lines += [encode(t).decode() for t in engine.classes.process(s)]
            continue
        o = engine.nodes.process(r)
        lines += [encode(t).decode() for t in o.transitions]
        for s in o.summaries:
            summary(encode(s))
            lines += [encode(t).decode() for t in engine.classes.process(s)]
    if flush:
        o = engine.nodes.flush()
        lines += [encode(t).decode() for t in o.transitions]
        for s in o.summaries:
            summary(encode(s))
            lines += [encode(t).decode() for t in engine.classes.process(s)]
        lines += [encode(t).decode() for t in engine.classes.flush()]
        lines += [encode(t).decode() for t in engine.inference.flush()]
    return lines


def scenario_lines(scenario: str, *, span_s: float = SPAN_S, nodes: int = 2, gpus: int = 4,
                   full_state: bool = False) -> Iterator[str]:
    """One line per transition of ``scenario``, then digests and counters."""
    sim = Simulator(scenario, nodes=nodes, gpus=gpus, seed=1, start_ts=START, tick_s=TICK_S)
    produced = list(sim.run(span_s))
    # stage 1's inputs delivered as before the inference and scheduler stages, their records on
    # their own; the scheduler's merged with stage 1's by delivery time (its allocations join them)
    # (so is the gpus-unused scenario's extra node, so that adding it to mixed changed nothing else)
    fleet = {sim_node(n) for n in range(nodes)}
    inputs = [r for r in produced if not isinstance(r, (InferenceMetrics, *SCHEDULER))]
    node = _timed([r for r in inputs if r.node in fleet], scenario)
    extra = _timed([r for r in inputs if r.node not in fleet], scenario + "/extra node")
    sched = _timed([r for r in produced if isinstance(r, SCHEDULER)], scenario + "/scheduler")
    node_records = [r for _, _, r in heapq.merge(node, extra, sched, key=lambda k: k[0])]
    inference = _delivery([r for r in produced if isinstance(r, InferenceMetrics)], scenario + "/inference")
    config = EngineConfig.model_validate({"observation_period": 1200.0, "slo": {s: SLO for s in SERVICES.values()},
                                          "serving": {s: {"max_batch": MAX_BATCH[s]} for s in SERVICES.values()}})
    engine, summaries = Engine(config=config), hashlib.sha256()
    half, ihalf = len(node_records) // 2, len(inference) // 2
    lines = _feed(engine, node_records[:half] + inference[:ihalf], summaries.update)
    stage1 = b"\n".join(engine.nodes.dump(n) for n in engine.nodes.nodes())
    resumed = Engine(config=config)
    resumed.load_all(engine.dump_all())
    lines += _feed(resumed, node_records[half:] + inference[ihalf:], summaries.update, flush=True)
    yield from (f"{scenario} {line}" for line in lines)
    yield f"{scenario} summaries {summaries.hexdigest()}"
    yield f"{scenario} stage-1 state {hashlib.sha256(stage1).hexdigest()}"
    yield f"{scenario} counters {sorted(resumed.counters().items())}"
    if full_state:
        yield f"{scenario} final state {hashlib.sha256(resumed.dump_all()).hexdigest()}"


def all_lines(**kw: object) -> Iterator[str]:
    for scenario in SCENARIOS:
        yield from scenario_lines(scenario, **kw)  # type: ignore[arg-type]


if __name__ == "__main__":
    big = "--big" in sys.argv  # the wider check: 8 GPUs, 3 h, and both stages' final state
    kw = {"span_s": 3 * 3600.0, "gpus": 8, "full_state": True} if big else {}
    for line in all_lines(**kw):
        print(line)
