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
from typing import Any

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
