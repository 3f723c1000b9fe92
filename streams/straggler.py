"""Which node of a multi-node job holds the whole job back (a straggler), from the fleet's own signals.

In synchronous data/tensor-parallel training every rank waits for the slowest one each step. The
slow node's GPUs stay busy computing, at a lower SM clock than their peers' or with more tensor
activity than usual against theirs, while the peers wait in collectives (utilisation still high
from NCCL kernels, tensor activity and power down, the SDK's ``comm_s`` up). Stage 2 sees every
node's per-minute summary of a job (it is keyed by task class, which every node of a job shares),
in content order (ts, node, task id) in one process, in a replay and in the Kafka workers alike, so
it compares a job's nodes here (:class:`StragglerJudge`, called by ``ClassStage``).

A job's minute is judged when the first summary of a later minute of it is applied: content order
has applied every node's summary of that minute by then. Each node (a *rank*: the task's GPUs on
that node, folded in stage 1's summary, its slowest GPU's clock) is scored against the median of
its peers (the job's other nodes) and against its own usual ratio to them (the median over its
last ``HISTORY`` judged minutes in which it was not flagged):

* clock: its slowest GPU's SM clock (a share of max) against the peers', ``CLOCK_GAP`` below its
  usual ratio (1.0 until it has ``MIN_HISTORY`` minutes: one job's GPUs run at one clock);
* tensor activity against the peers', ``BUSY_GAP`` above its usual ratio (needs ``MIN_HISTORY``
  minutes: ranks that do different work, pipeline stages, differ in it from the start and keep
  their ratio; a rank that begins to compute while the others wait changes its own);
* its slowest GPU's PCIe link (generation and width as bandwidth) against the peers', ``LINK_GAP``
  below theirs: a link that trained down (x16 to x8, Gen5 to Gen3) slows the rank's transfers, its
  inter-node traffic among them, and every rank then waits in the same collectives, so neither its
  clock nor its tensor activity stands out; one job's nodes run one kind of link.

A minute is judged only when every node reports and each is at least ``BUSY_UTIL`` busy: at a
checkpoint or an evaluation all ranks dip together, and such minutes say nothing about who is slow.
The step time (any node's SDK) against the job's best of its recent unflagged minutes, the peers'
communication share, power against the peers' and the rank's cause columns (thermal cap, power
brake or HW slowdown, lowered power limit, remap pending, uncorrected ECC, NVLink links down, the
PCIe link against the peers' and against its own best) are the evidence, as scalars of scope ``rank`` (``streams.metrics``) for the rule pack's ``rank`` rules.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Any

from gpuwarden.contract import AlertTransition, TaskSummary, simulated_labels
from gpuwarden.streams.columns import link_gbs
from gpuwarden.streams.evaluate import Context, evaluate, resolve_all
from gpuwarden.streams.rules import Rule
from gpuwarden.streams.statecodec import state

#: Judged minutes of a rank's own ratios kept (its usual), and of the job's step time (its best).
HISTORY = 60
#: A rank's own usual ratios count from this many judged minutes on.
MIN_HISTORY = 10
#: Every node at least this busy (%), or the minute is not judged.
BUSY_UTIL = 50.0
#: A rank's slowest GPU this far (share of the peers' clock) below its usual ratio is slow.
CLOCK_GAP = 0.08
#: A rank's tensor activity this far (share) above its usual ratio to its peers' is slow.
BUSY_GAP = 0.15
#: A rank's slowest PCIe link this far (share of the bandwidth) below the peers' is slow: a link that
#: trains down loses at least half (one generation or half its lanes).
LINK_GAP = 0.25
#: A rank flagged in its last judged minute stays flagged until it is back within this share of
#: either gap (hysteresis: a throttle that comes and goes would otherwise resolve and fire again
#: with a good minute or two; a node whose clock ran 2 min behind its peer's did, test_clock_skew).
HOLD = 0.5
#: The summary stats a judged minute keeps per node.
KEPT = ("util_gpu", "clock_frac", "tensor_active", "power_w", "step_time_s", "comm_share", "thermal_cap",
        "power_brake", "hw_slowdown", "power_limit_frac", "remap_pending", "ecc_uncorrected", "nvlink_down",
        "pcie_gen", "pcie_width", "pcie_link_frac")
#: The rank's own cause columns, said as they are.
CAUSES = ("thermal_cap", "power_limit_frac", "remap_pending", "ecc_uncorrected", "nvlink_down", "pcie_link_frac")


#: A minute is judged once a summary of the job this much later has come: its nodes' summaries
#: reach stage 2 in different orders in one process and through Kafka (a node's minute after
#: another's next one), and a minute judged before all of them are in judged fewer nodes.
GATHER_S = 120.0


@state
class Rank:
    """One node of a job: its own usual ratios to its peers, its alerts, its newest figures."""

    __slots__ = ("node", "gpus", "clock", "tensor", "last_ts", "figures", "alerts", "slow")
    ADDED = {"slow": bool}  # state written before the flag held (HOLD)

    def __init__(self, node: str) -> None:
        self.node = node
        self.gpus = ""
        self.clock: deque = deque(maxlen=HISTORY)  # clock ratio to the peers' median, unflagged minutes
        self.tensor: deque = deque(maxlen=HISTORY)  # tensor activity ratio to the peers' median, likewise
        self.last_ts = 0.0  # the newest minute it reported
        self.figures: dict = {}  # scalars of its newest judged minute ({} when that minute was not judged)
        self.alerts: dict = {}
        self.slow = False  # flagged in its last judged minute


@state
class JobRanks:
    """One job's nodes: the minute being gathered, each node's stats of it, the ranks."""

    __slots__ = ("minute", "pending", "ranks", "steps", "labels")

    def __init__(self) -> None:
        self.minute = float("-inf")  # the newest minute judged
        self.pending: list = []  # [minute, node, {stat: value} plus "gpus"] not judged yet
        self.ranks: dict = {}  # node -> Rank
        self.steps: deque = deque(maxlen=HISTORY)  # the job's step time in minutes with no rank flagged
        self.labels: dict = {}


class _RankCtx(Context):
    """The scalars of one rank's judged minute."""

    def __init__(self) -> None:
        super().__init__()
        self.figures: dict[str, float] = {}

    def scalar(self, metric: str) -> float | None:
        return self.figures.get(metric)

    def has_events(self) -> bool:
        return False


def _ratio(x: float | None, peers: list[float]) -> float | None:
    ref = median(peers) if peers else None
    return None if x is None or not ref else x / ref


def _link(stats: dict) -> float | None:
    """The bandwidth of a node's slowest PCIe link in the minute (GB/s), None where it was not read."""
    gen, width = stats.get("pcie_gen"), stats.get("pcie_width")
    return None if gen is None or width is None else link_gbs(gen, width)


def _usual(history: deque) -> float | None:
    return median(history) if len(history) >= MIN_HISTORY else None


class StragglerJudge:
    """Gathers a class's summaries per job and minute, judges each minute's ranks, runs ``rules``."""

    def __init__(self, rules: list[Rule], expiry_s: float) -> None:
        self.rules = rules
        self.expiry_s = expiry_s
        self._ctx = _RankCtx()

    def take(self, jobs: dict[str, JobRanks], summary: TaskSummary) -> list[AlertTransition]:
        """One summary applied in content order; the transitions of the minute it closes."""
        job = jobs.get(summary.task_id)
        if job is None:
            job = jobs[summary.task_id] = JobRanks()
        t, out = summary.ts, []
        if t <= job.minute:
            return []  # applied late, after its minute was judged
        labels = {"task": summary.task_id, "task_class": summary.task,
                  **{k: v for k, v in summary.labels.items() if k in ("user", "project")}}
        job.labels = simulated_labels(labels) if summary.simulated else labels
        stats = {k: summary.stats[k] for k in KEPT if summary.stats.get(k) is not None}
        stats["gpus"] = summary.labels.get("gpus", "")
        job.pending.append([t, summary.node, stats])
        due = sorted({m for m, _, _ in job.pending if m <= t - GATHER_S})
        for m in due:  # each minute once every node's summary of it is in, whatever their order
            minute = {node: st for mm, node, st in job.pending if mm == m}
            job.pending = [p for p in job.pending if p[0] != m]
            job.minute = m
            out += self._judge(job, minute, m + GATHER_S)
        return out

    def _judge(self, job: JobRanks, minute: dict[str, dict], now: float) -> list[AlertTransition]:
        """Score one gathered minute's ranks, learn from the unflagged ones, run the rules at ``now``."""
        if len(minute) < 2 and not job.ranks:
            return []  # a job on one node (most): nothing to compare
        for node in minute:
            if node not in job.ranks:
                job.ranks[node] = Rank(node)
            job.ranks[node].last_ts = job.minute
        if len(minute) < 2 or not all(s.get("util_gpu", 0.0) >= BUSY_UTIL and s.get("clock_frac")
                                      for s in minute.values()):
            return []  # a checkpoint, an evaluation, a start: nobody judged, the alerts hold as they are
        steps = [s["step_time_s"] for s in minute.values() if s.get("step_time_s")]
        step = median(steps) if steps else None
        best = min(job.steps) if len(job.steps) >= 3 else None
        scored = {node: self._score(job.ranks[node], node, minute, step, best) for node in sorted(minute)}
        flagged = {node for node, figures in scored.items() if figures["straggler"]}
        for node, figures in scored.items():
            rank = job.ranks[node]
            rank.slow = node in flagged
            if node not in flagged:
                rank.clock.append(figures["clock_vs_peers"])
                if "tensor_vs_peers" in figures:
                    rank.tensor.append(figures["tensor_vs_peers"])
        if step is not None and not flagged:
            job.steps.append(step)
        out: list[AlertTransition] = []
        for node in sorted(job.ranks):
            rank = job.ranks[node]
            rank.figures = scored.get(node, {})
            if node in minute:
                rank.gpus = minute[node].get("gpus", "")
            out += self._evaluate(job, rank, now)
        return out

    @staticmethod
    def _score(rank: Rank, node: str, minute: dict[str, dict], step: float | None,
               best: float | None) -> dict[str, float]:
        s = minute[node]
        peers = [p for n, p in minute.items() if n != node]
        clock = _ratio(s["clock_frac"], [p["clock_frac"] for p in peers])
        assert clock is not None  # every node has a clock_frac (judged only then)
        usual_clock = _usual(rank.clock) or 1.0
        figures = {"clock_vs_peers": clock, "clock_usual": usual_clock, "nodes": float(len(minute))}
        hold = HOLD if rank.slow else 1.0
        slow = clock <= min(usual_clock, 1.0) - CLOCK_GAP * hold
        tensors = [p.get("tensor_active") for p in peers]
        if s.get("tensor_active") is not None and None not in tensors:
            tensor = _ratio(s["tensor_active"], tensors)  # type: ignore[arg-type]
            if tensor is not None:
                figures["tensor_vs_peers"] = tensor
                usual_tensor = _usual(rank.tensor)
                if usual_tensor is not None:
                    figures["tensor_usual"] = usual_tensor
                    slow = slow or tensor >= usual_tensor * (1.0 + BUSY_GAP * hold)
        linked = [p for p in peers if _link(p) is not None]
        link = _ratio(_link(s), [_link(p) for p in linked])  # type: ignore[misc]
        if link is not None:
            figures.update(pcie_vs_peers=link, pcie_gen=s["pcie_gen"], pcie_width=s["pcie_width"],
                           peers_pcie_gen=median(p["pcie_gen"] for p in linked),
                           peers_pcie_width=median(p["pcie_width"] for p in linked))
            slow = slow or link <= 1.0 - LINK_GAP * hold
        power = _ratio(s.get("power_w"), [p["power_w"] for p in peers if p.get("power_w") is not None])
        if power is not None:
            figures["power_vs_peers"] = power
        comm = [p["comm_share"] for p in peers if p.get("comm_share") is not None]
        if comm:
            figures["peers_comm_share"] = median(comm)
        if step is not None and best:
            figures["step_time_rise"] = step / best - 1.0
        brake = [s[k] for k in ("power_brake", "hw_slowdown") if s.get(k) is not None]
        if brake:
            figures["power_brake"] = max(brake)
        figures.update({k: s[k] for k in CAUSES if s.get(k) is not None})
        figures["straggler"] = 1.0 if slow else 0.0
        return {k: round(v, 6) for k, v in figures.items()}

    def _evaluate(self, job: JobRanks, rank: Rank, now: float) -> list[AlertTransition]:
        if not self.rules and not rank.alerts:
            return []
        ctx = self._ctx
        ctx.figures = rank.figures
        labels = {**job.labels, "node": rank.node, "gpus": rank.gpus}
        return evaluate(self.rules, ctx, now, {"task": job.labels["task"], "node": rank.node}, labels, rank.alerts)

    def expire(self, jobs: dict[str, JobRanks], live: set[str], t: float) -> list[AlertTransition]:
        """Resolve and forget the ranks of jobs no longer live and nodes silent ``expiry_s``."""
        out: list[AlertTransition] = []
        for tid in sorted(jobs):
            job = jobs[tid]
            for node in sorted(job.ranks):
                if tid not in live or t - job.ranks[node].last_ts >= self.expiry_s:
                    out += resolve_all(job.ranks[node].alerts, t)
                    del job.ranks[node]
            if tid not in live:
                del jobs[tid]
        return out


def open_slots(jobs: dict[str, JobRanks]) -> list[tuple[str, Any]]:
    """Every firing rank alert of a class's jobs, as (fingerprint, slot)."""
    return [(fp, s) for tid in sorted(jobs) for node in sorted(jobs[tid].ranks)
            for fp, s in jobs[tid].ranks[node].alerts.items() if s.firing_since is not None]
