"""The simulated cluster's scheduler: what a Slurm collector would publish for the simulator.

Every ``POLL_S`` of event time it sends one poll (``scheduler_job/1`` per job, ``node_capacity/1``
per node, then ``scheduler_poll/1``) of cluster ``sim``: partition ``gpu`` holds the simulated
nodes and their Slurm jobs (the GPUs they sample), and each scheduler scenario adds a
partition of its own on nodes that are only scheduled, never sampled, so the scenarios do not
disturb each other or the GPU faults:

* ``queue-buildup`` (partition ``batch``, ``bn-0``/``bn-1``, 4 GPUs each): a 1-GPU job every
  2 min, waiting 1 min and running 7 min, until a sweep takes every GPU 25 min after onset;
  from then on new jobs wait (``Resources``) ever longer.
* ``fragmentation`` (``train``, ``tn-0``/``tn-1``): a 2-GPU job on each node; from onset a
  4-GPU job waits with 4 GPUs free in total and no node with 4.
* ``preemption-storm`` (``spot``, ``sn-0``): from onset a 2-GPU job is preempted every 5 min
  (pending for 1 min, then running again), 6 times.
* ``gpus-unused``: the simulator's extra node runs an 8-GPU evaluation job that, from onset,
  works on 2 of its GPUs (``producers/simulator.py``); the scheduler still counts all 8.

Times are pure functions of event time (no state but the next poll), so a run is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob, SchedulerPoll

CLUSTER = "sim"
POLL_S = 30.0
BUILDUP_AFTER_S = 1500.0
ARRIVE_EVERY_S, WAIT_S, RUN_S = 120.0, 60.0, 420.0
PREEMPT_EVERY_S, PREEMPT_PENDING_S, PREEMPTIONS = 300.0, 60.0, 6
#: Partitions of the scheduler scenarios: their nodes (GPUs each).
PARTITIONS = {"queue-buildup": ("batch", ("bn-0", "bn-1"), 4), "fragmentation": ("train", ("tn-0", "tn-1"), 4),
              "preemption-storm": ("spot", ("sn-0",), 4)}
CLUSTER_SCENARIOS = (*PARTITIONS, "gpus-unused")


@dataclass
class SimJob:
    """A job as the simulated scheduler shows it at one poll."""

    job_id: str
    user: str
    queue: str
    gpus: int
    submit: float
    state: JobState = JobState.PENDING
    reason: str = ""
    start: float | None = None
    alloc: dict[str, list[int]] = field(default_factory=dict)
    restarts: int = 0


class Simulated(Protocol):
    """What the scheduler reads of the simulator (``producers/simulator.py``, which imports this)."""

    start_ts: float
    onset_ts: float
    nodes: list[Any]  # NodeSim: name, gpus (GpuSim: index, job)
    jobs: list[Any]  # Job: slurm_job_id, ended, start_ts, gpus, cls.user


class ClusterSim:
    """The scheduler polls of the simulated cluster (``step(ts)``: the records due at ``ts``)."""

    def __init__(self, sim: Simulated, scenarios: set[str]) -> None:
        self.sim, self.scenarios = sim, scenarios
        self.next_poll = sim.start_ts

    def step(self, ts: float) -> list[Any]:
        if ts < self.next_poll:
            return []
        while self.next_poll <= ts:
            self.next_poll += POLL_S
        jobs = self._sampled(ts)
        nodes: dict[str, tuple[str, int]] = {n.name: ("gpu", len(n.gpus)) for n in self.sim.nodes}
        for name in sorted(self.scenarios & set(PARTITIONS)):
            part, names, gpus = PARTITIONS[name]
            nodes.update({n: (part, gpus) for n in names})
            jobs += getattr(self, "_" + name.replace("-", "_"))(ts)
        used: dict[str, int] = {}
        for j in jobs:
            for n, idx in j.alloc.items():
                used[n] = used.get(n, 0) + len(idx)
        for n in self.sim.nodes:  # pods hold GPUs too, though Slurm does not list them
            used[n.name] = sum(1 for g in n.gpus if g.job is not None and not g.job.ended)
        out: list[Any] = [self._record(j, ts) for j in jobs]
        out += [NodeCapacity(ts=ts, cluster=CLUSTER, scheduler="slurm", simulated=True, node=n, partitions=[p],
                             gpu_type="h200", state="mixed" if used.get(n) else "idle", gpus_total=g,
                             gpus_allocated=min(g, used.get(n, 0))) for n, (p, g) in sorted(nodes.items())]
        out.append(SchedulerPoll(ts=ts, cluster=CLUSTER, scheduler="slurm", simulated=True, jobs=len(jobs),
                                 nodes=len(nodes)))
        return out

    @staticmethod
    def _record(j: SimJob, ts: float) -> SchedulerJob:
        return SchedulerJob(ts=ts, cluster=CLUSTER, scheduler="slurm", simulated=True, job_id=j.job_id,
                            name=j.job_id, user=j.user, account=j.user, queue=j.queue, state=j.state, reason=j.reason,
                            submit_time=j.submit, start_time=j.start, gpus=j.gpus, gpu_type="h200",
                            nodes=sorted(j.alloc), gpu_indices=j.alloc, restarts=j.restarts)

    def _sampled(self, ts: float) -> list[SimJob]:
        """The simulator's running Slurm jobs (pods are Kubernetes', not this scheduler's)."""
        out = []
        for job in self.sim.jobs:
            if job.slurm_job_id is None or job.ended or job.start_ts > ts:
                continue
            alloc: dict[str, list[int]] = {}
            for g in job.gpus:
                alloc.setdefault(g.node.name, []).append(g.index)
            out.append(SimJob(job.slurm_job_id, job.cls.user, "gpu", len(job.gpus), job.start_ts - WAIT_S,
                              JobState.RUNNING, "", job.start_ts, alloc))
        return out

    def _queue_buildup(self, ts: float) -> list[SimJob]:
        t0, buildup = self.sim.start_ts, self.sim.onset_ts + BUILDUP_AFTER_S
        out, free = [], [("bn-0", i) for i in range(4)] + [("bn-1", i) for i in range(4)]
        k = 0
        while (submit := t0 + k * ARRIVE_EVERY_S) <= ts:
            start = submit + WAIT_S
            j = SimJob(f"b{k}", ("kim", "lee", "ana")[k % 3], "batch", 1, submit)
            k += 1
            if submit >= buildup:
                j.reason = "Resources"
            elif ts < start:
                j.reason = "Priority"
            elif ts < start + RUN_S:
                node, idx = free[k % len(free)]
                j.state, j.start, j.alloc = JobState.RUNNING, start, {node: [idx]}
            else:
                continue  # ended and gone from the queue
            out.append(j)
        if ts >= buildup:  # the sweep starts once the jobs started before it have ended
            sweep = SimJob("sweep", "hana", "batch", 8, buildup, reason="Resources")
            if ts >= buildup + WAIT_S + RUN_S:
                sweep.state, sweep.reason, sweep.start = JobState.RUNNING, "", buildup + WAIT_S + RUN_S
                sweep.alloc = {"bn-0": [0, 1, 2, 3], "bn-1": [0, 1, 2, 3]}
            out.append(sweep)
        return out

    def _fragmentation(self, ts: float) -> list[SimJob]:
        t0, onset = self.sim.start_ts, self.sim.onset_ts
        out = [SimJob("t1", "bob", "train", 2, t0 - 900, JobState.RUNNING, "", t0 - 600, {"tn-0": [0, 1]}),
               SimJob("t2", "dmitri", "train", 2, t0 - 900, JobState.RUNNING, "", t0 - 600, {"tn-1": [0, 1]})]
        if ts >= onset:
            out.append(SimJob("t3", "chen", "train", 4, onset, reason="Resources"))
        return out

    def _preemption_storm(self, ts: float) -> list[SimJob]:
        t0, onset = self.sim.start_ts, self.sim.onset_ts
        n = min(PREEMPTIONS, max(0, int((ts - onset) // PREEMPT_EVERY_S)))
        at = onset + n * PREEMPT_EVERY_S
        j = SimJob("s1", "ivan", "spot", 2, t0 - 120, restarts=n)
        if n and ts - at < PREEMPT_PENDING_S:
            j.reason = "BeginTime"
        else:
            j.state, j.start, j.alloc = JobState.RUNNING, at + PREEMPT_PENDING_S if n else t0, {"sn-0": [0, 1]}
        return [j]
