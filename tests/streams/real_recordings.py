"""The real H200 recordings and how they are replayed through the default pack: shared by
tests/streams/test_real_recordings.py and bench/rules_table.py (the real-recordings column of
docs/rules.md).

Both recordings are shorter than the rules' windows (10-15 min), so each is replayed
time-dilated: every timestamp ``t`` becomes ``t0 + k·(t - t0)`` and the durations a record
carries (a snapshot's ``interval_s``, a step's times) are multiplied by ``k``: the same shapes,
``k`` times slower (a slope in GiB/h is ``k`` times smaller).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from gpuwarden.clocks import HW_POWER_BRAKE, HW_SLOWDOWN, reason_names
from gpuwarden.contract import AlertTransition, NodeSnapshot, TaskMetric, TaskMetricKind, decode, unbatch
from gpuwarden.streams.config import EngineConfig
from gpuwarden.streams.engine import Engine
from gpuwarden.streams.rules import DEFAULT_RULES, compile_rules, load_rule_file

FIXTURES = Path(__file__).parent.parent / "fixtures"
AGENT = FIXTURES / "h200" / "h200-agent.jsonl"
PROBE_RAW = FIXTURES / "h200-leak-probe" / "h200-leak-probe.jsonl"
PROBE = FIXTURES / "h200-leak-probe" / "h200-leak-probe.records.jsonl"

#: recording -> (its records, the dilation that fills the rules' windows, the default rules that
#: fire there: what really happened, see tests/streams/test_real_recordings.py).
REAL_RECORDINGS: dict[str, tuple[Path, float, set[str]]] = {
    "h200-agent": (AGENT, 20, {"data-loader-starvation"}),
    "h200-leak-probe": (PROBE, 60, {"memory-leak"}),
}


def records(path: Path) -> list[Any]:
    return list(unbatch(decode(line) for line in path.read_bytes().splitlines() if line.strip()))


def dilate(recs: list[Any], k: float) -> list[Any]:
    t0 = min(r.ts for r in recs)
    out = []
    for r in recs:
        update: dict[str, Any] = {"ts": t0 + k * (r.ts - t0)}
        if isinstance(r, NodeSnapshot) and r.interval_s:
            update["interval_s"] = r.interval_s * k
        if isinstance(r, TaskMetric):
            update.update({f: getattr(r, f) * k for f in ("step_time_s", "data_wait_s", "comm_s")
                           if getattr(r, f) is not None})
        out.append(r.model_copy(update=update))
    return sorted(out, key=lambda r: r.ts)


def run(recs: list[Any], share: float | None = None) -> list[AlertTransition]:
    """The default pack (``share``: clock-capped's clock share lowered, as a user's override would)."""
    rf = load_rule_file(DEFAULT_RULES)
    if share is not None:
        spec = next(r for r in rf.rules if r.name == "clock-capped")
        loss = next(c.threshold for c in spec.when.all if c.threshold.metric == "cap_clock_loss")
        loss.value = share
    engine = Engine(compile_rules(rf, "<test>"), EngineConfig())
    return engine.process_many(recs) + engine.flush()


def firing(transitions: list[AlertTransition]) -> set[tuple[str, str]]:
    return {(t.rule, t.tier) for t in transitions if t.state == "firing"}


# ------------------------------------------------------------------ the leak probe as a task's job

#: Seconds into the leak probe (undilated) where its memory first rises above the idle 615 MiB.
PROBE_ONSET_S = 6.09
#: Where the probe's job writes a checkpoint (undilated seconds, begin and end): three during the
#: leak, 0.6 s each (12 s at ×20, 36 s at ×60), the GPU idle while it writes.
PROBE_CHECKPOINTS = ((9.0, 9.6), (12.5, 13.1), (16.0, 16.6))
PROBE_TASK = {"task": "llm-finetune", "task_id": "probe-job", "user": "alice"}
#: ... and where its first allocation is done (0.6 -> 2.1 GiB in its first half second).
PROBE_WARM_S = 6.7


def as_task(recs: list[Any], *, util_scale: float = 0.25, checkpoints: tuple[tuple[float, float], ...] = (),
            healthy: bool = False) -> list[Any]:
    """The leak probe's records as a task's job would make them (undilated; ``dilate`` after):
    its process attributed to ``PROBE_TASK``, the recorded utilization times ``util_scale`` (0.25:
    the probe's 0-28 % becomes 0-7 %, a job that mostly waits), 0 inside ``checkpoints``, which
    the task's SDK reports (checkpoint_begin/end records). ``healthy``: the job leaks nothing:
    from ``PROBE_WARM_S`` its memory stays at the level it had reached (its start-up), and what
    the recording gained during a checkpoint is staged for the write and given back at its end."""
    t0 = min(r.ts for r in recs)
    warm = t0 + PROBE_WARM_S
    marks = sorted((t0 + b, t0 + e) for b, e in checkpoints)
    out: list[Any] = []
    level = staged_from = None  # healthy: the memory it keeps; the recorded memory at this checkpoint's begin
    for r in recs:
        assert isinstance(r, NodeSnapshot)
        t, g = r.ts, r.gpus.rows()[0]
        pid = r.processes.pid[0] if len(r.processes) else None
        for b, e in marks:
            for at, kind in ((b, TaskMetricKind.CHECKPOINT_BEGIN), (e, TaskMetricKind.CHECKPOINT_END)):
                if at <= t < at + 0.1:
                    out.append(TaskMetric(ts=t, node=r.node, task=PROBE_TASK["task"], task_id=PROBE_TASK["task_id"],
                                          kind=kind, pid=pid))
        inside = any(b <= t < e for b, e in marks)
        mem = g.mem_used_bytes
        if healthy and t >= warm:
            if level is None:
                level = mem
            if inside and staged_from is None:
                staged_from = mem
            elif not inside:
                staged_from = None
            mem = level + (mem - staged_from if staged_from is not None else 0)
        gpu = g.model_copy(update={"util_gpu": 0.0 if inside else round(g.util_gpu * util_scale, 1),
                                   "mem_used_bytes": mem})
        procs = [p.model_copy(update={**PROBE_TASK, "used_memory_bytes": mem}) for p in r.processes.rows()]
        out.append(NodeSnapshot.of(ts=t, node=r.node, seq=r.seq, boot_id=r.boot_id, agent_version=r.agent_version,
                                   interval_s=r.interval_s, gpus=[gpu], processes=procs))
    return out


# ------------------------------------------------------------------ a power-heavy phase, built from the agent's recording

#: Seconds into the agent's recording (undilated) where its load begins and ends (the 0x4 samples).
HEAVY_FROM_S, HEAVY_TO_S = 7.0, 56.5
#: What issue #30 measured in a real power-heavy phase of an H200: 683 of 700 W drawn, the SM clock
#: 25 % below its 1,980 MHz maximum (issue #18's phase: 1,575 MHz at 691 W).
HEAVY_POWER_W, HEAVY_CLOCK_LOSS_MHZ = 683.0, 480


def power_heavy(recs: list[Any]) -> list[Any]:
    """The agent's recording with its load made power-heavy (no real recording has one): the idle
    start and the exit as recorded; during the load each sample's power is ``HEAVY_POWER_W`` plus a
    quarter of its recorded deviation from the load's mean (the real jitter, ±7 W), its SM clock the
    recorded one less ``HEAVY_CLOCK_LOSS_MHZ``, its utilization 100 less the recorded (93-100 %), its
    clock-event bits as recorded (0x4 in 47 of the 50 samples)."""
    snaps = [r for r in recs if isinstance(r, NodeSnapshot)]
    t0 = snaps[0].ts
    heavy = [r for r in snaps if HEAVY_FROM_S <= r.ts - t0 <= HEAVY_TO_S]
    mean = sum(r.gpus.rows()[0].power_w or 0.0 for r in heavy) / len(heavy)
    out: list[Any] = []
    for r in snaps:
        g = r.gpus.rows()[0]
        if HEAVY_FROM_S <= r.ts - t0 <= HEAVY_TO_S:
            g = g.model_copy(update={"power_w": round(HEAVY_POWER_W + ((g.power_w or 0.0) - mean) / 4, 3),
                                     "clock_sm_mhz": (g.clock_sm_mhz or 0) - HEAVY_CLOCK_LOSS_MHZ,
                                     "util_gpu": 100.0 - (g.util_gpu or 0.0)})
        out.append(NodeSnapshot.of(ts=r.ts, node=r.node, seq=r.seq, boot_id=r.boot_id, agent_version=r.agent_version,
                                   interval_s=r.interval_s, gpus=[g], processes=r.processes.rows()))
    return out


# ------------------------------------------------------------------ the agent's load as a 4-node job

#: The agent's load as one rank of a multi-node data-parallel job: the SDK's task on every node
#: (the recording's process was attributed by its command; its step records by the SDK).
JOB = {"task": "h200-probe", "task_id": "probe-454"}
#: The job's nodes, and how far apart (undilated seconds) their copies of the recording start.
JOB_NODES, JOB_OFFSET_S = 4, 0.4


class SlowRank(NamedTuple):
    """From ``onset_s`` (undilated, into the recording) node ``node`` computes at ``share`` of its
    recorded SM clock, with ``reasons`` (NVML clock-event bits; 0: none reported) instead of the
    recorded ones."""

    node: int
    onset_s: float
    share: float
    reasons: int = 0


def job_node(i: int) -> str:
    return f"h200-node-{i}"


def on_nodes(recs: list[Any], nodes: int = JOB_NODES, slow: SlowRank | None = None, *,
             busy: bool = True) -> list[Any]:
    """The agent's recording (undilated; ``dilate`` after) as one job on ``nodes`` nodes, node i's
    copy ``i·JOB_OFFSET_S`` later, with its own node name, boot id and GPU uuid. ``busy``: during
    the load each GPU's utilization is 100 less the recorded (93-100 %, as ``power_heavy``): a rank
    of a multi-node job is kept busy by its collectives between the matmuls, where the recorded
    single-GPU load showed 0-7 % (under the straggler judge's BUSY_UTIL: as recorded no minute of
    it is judged). Clocks, reasons, power and tensor activity as recorded.

    ``slow``: from its onset (one instant for the whole job) the slow rank's compute part of each
    step (the SDK's step less its data wait, ``C``) takes ``C/share``, and every rank's step is
    ``D + C/share`` (synchronous: each waits for the slowest; the others' extra is ``comm_s``).
    The same work in a longer step: every rank's power above idle and its tensor activity are
    scaled by ``T/T'`` (the recorded mean step over the slowed one; the slow rank's power too, at
    the same energy per operation: a lower voltage with its clock would lower it), the slow rank's
    tensor activity by ``1/share`` more (the same tensor-pipe cycles among fewer cycles at its
    lower clock); its SM clock is ``share`` of the recorded and its clock-event bits are ``reasons``."""
    snaps = [r for r in recs if isinstance(r, NodeSnapshot)]
    steps = [r for r in recs if isinstance(r, TaskMetric) and r.kind == TaskMetricKind.STEP and r.step_time_s]
    t0, idle_w = snaps[0].ts, snaps[0].gpus.rows()[0].power_w or 0.0
    pace = 1.0
    if slow is not None:
        d = sum(m.data_wait_s or 0.0 for m in steps) / len(steps)
        c = sum(m.step_time_s or 0.0 for m in steps) / len(steps) - d
        pace = (d + c) / (d + c / slow.share)
    out: list[Any] = []
    for i in range(nodes):
        node, shift = job_node(i), i * JOB_OFFSET_S
        for r in recs:
            late = slow is not None and r.ts + shift - t0 >= slow.onset_s
            if isinstance(r, TaskMetric):
                update: dict[str, Any] = {"ts": r.ts + shift, "node": node}
                if late and r.kind == TaskMetricKind.STEP and r.step_time_s:
                    assert slow is not None
                    compute = r.step_time_s - (r.data_wait_s or 0.0)
                    update["step_time_s"] = r.step_time_s + compute * (1 / slow.share - 1)
                    update["comm_s"] = 0.0 if i == slow.node else compute * (1 / slow.share - 1)
                out.append(r.model_copy(update=update))
                continue
            g = r.gpus.rows()[0]
            gpu: dict[str, Any] = {"uuid": f"{g.uuid[:-2]}{i:02x}"}
            if busy and HEAVY_FROM_S <= r.ts - t0 <= HEAVY_TO_S:
                gpu["util_gpu"] = 100.0 - (g.util_gpu or 0.0)
            if late and HEAVY_FROM_S <= r.ts - t0 <= HEAVY_TO_S:
                assert slow is not None
                mine = slow.node == i
                gpu["power_w"] = round(idle_w + ((g.power_w or 0.0) - idle_w) * pace, 3)
                if g.tensor_active is not None:
                    gpu["tensor_active"] = round(g.tensor_active * pace / (slow.share if mine else 1.0), 3)
                if mine:
                    gpu.update(clock_sm_mhz=round((g.clock_sm_mhz or 0) * slow.share),
                               clock_event_reasons=slow.reasons, clock_event_names=reason_names(slow.reasons))
            procs = [p.model_copy(update={**JOB, "gpu_uuid": gpu["uuid"]}) for p in r.processes.rows()]
            out.append(NodeSnapshot.of(ts=r.ts + shift, node=node, seq=r.seq, boot_id=f"{r.boot_id[:-2]}{i:02x}",
                                       agent_version=r.agent_version, driver_version=r.driver_version,
                                       cuda_version=r.cuda_version, interval_s=r.interval_s,
                                       gpus=[g.model_copy(update=gpu)], processes=procs))
    return sorted(out, key=lambda r: r.ts)


#: Undilated seconds into the agent's recording (its load runs 7-56.5 s) where the slow rank
#: begins: at ×20, 440 s of the job before it and 690 s after.
SLOW_ONSET_S = 22.0
#: The silent case: 80 % of the recorded SM clock, no reason bit (the recorded SW power cap bit
#: cleared: the slowed GPU draws no more than its peers, and the bit is not what slowed it).
SILENT = SlowRank(node=3, onset_s=SLOW_ONSET_S, share=0.8)
#: The HW power brake (NVML: HW slowdown is engaged with it, "reducing the core clocks by a factor
#: of 2 or more"): half the recorded clock.
BRAKE = SlowRank(node=0, onset_s=SLOW_ONSET_S, share=0.5, reasons=HW_POWER_BRAKE | HW_SLOWDOWN)


class JobRun(NamedTuple):
    """The default pack on a job of ``on_nodes`` at ×20: its transitions, and per node how many
    judged minutes its clock ratio was learnt from (stage 2's state before the flush)."""

    transitions: list[AlertTransition]
    judged: dict[str, int]
    onset: float  # the slow rank's onset (event time, dilated)


def job_run(slow: SlowRank | None, *, busy: bool = True) -> JobRun:
    k = REAL_RECORDINGS["h200-agent"][1]
    recs = records(AGENT)
    engine = Engine()
    trs = engine.process_many(dilate(on_nodes(recs, slow=slow, busy=busy), k))
    ranks = engine.classes._classes[JOB["task"]].ranks[JOB["task_id"]].ranks
    judged = {node: len(rank.clock) for node, rank in sorted(ranks.items())}
    onset = min(r.ts for r in recs) + k * (slow.onset_s if slow is not None else SLOW_ONSET_S)
    return JobRun(trs + engine.flush(), judged, onset)
