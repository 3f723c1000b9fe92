"""The simulated cluster's scheduler: what a Slurm collector would publish for the simulator.

Every ``POLL_S`` of event time it sends one poll (``scheduler_job/1`` per job, ``node_capacity/1``
per node, then ``scheduler_poll/1``) of cluster ``sim``: partition ``gpu`` holds the simulated
nodes and their Slurm jobs (the GPUs they sample), and each scheduler scenario adds a
partition of its own on nodes that are only scheduled, never sampled, so the scenarios do not
disturb each other or the GPU faults:

* ``queue-buildup`` (partition ``batch``, ``bn-0``/``bn-1``, 4 GPUs each): a 1-GPU job every
  2 min, waiting 1 min and running 7 min, until a sweep takes every GPU 25 min after onset for
  ``SWEEP_RUN_S``; meanwhile new jobs wait (``Resources``) ever longer, the users submitting no
  more once ``MAX_PENDING`` of theirs wait (as Slurm's ``MaxSubmitJobs`` refuses them), and after
  the sweep the queue drains at the rate the partition runs jobs: the queue stays bounded.
* ``fragmentation`` (``train``, ``tn-0``/``tn-1``): a 2-GPU job on each node; from onset a
  4-GPU job waits with 4 GPUs free in total and no node with 4.
* ``preemption-storm`` (``spot``, ``sn-0``): from onset a 2-GPU job is preempted every 5 min
  (pending for 1 min, then running again), 6 times.
* ``gpus-unused``: the simulator's extra node runs an 8-GPU evaluation job that, from onset,
  works on 2 of its GPUs (``producers/simulator.py``); the scheduler still counts all 8.

Times are pure functions of event time (the batch queue's schedule is worked out as event time
reaches each submission, in order), so a run is reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob, SchedulerPoll

CLUSTER = "sim"
POLL_S = 30.0
BUILDUP_AFTER_S = 1500.0
ARRIVE_EVERY_S, WAIT_S, RUN_S = 120.0, 60.0, 420.0
#: The queue-buildup sweep holds the batch partition this long; at most this many batch jobs wait.
SWEEP_RUN_S, MAX_PENDING = 7200.0, 16
BATCH_USERS = ("kim", "lee", "ana")
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
        self.batch = BatchQueue(sim.start_ts, sim.onset_ts + BUILDUP_AFTER_S)

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
        out = []
        for j in self.batch.at(ts):
            shown = SimJob(j.job_id, j.user, "batch", j.gpus, j.submit)
            if ts < j.start:
                shown.reason = "Resources" if j.start > j.submit + WAIT_S else "Priority"
            else:
                shown.state, shown.start, shown.alloc = JobState.RUNNING, j.start, {n: list(i) for n, i in j.alloc}
            out.append(shown)
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


@dataclass(frozen=True, slots=True)
class Planned:
    """A batch job's whole life, known once it is submitted: FIFO on fixed run times."""

    job_id: str
    user: str
    gpus: int
    submit: float
    start: float
    end: float
    alloc: tuple[tuple[str, tuple[int, ...]], ...]
    """(node, GPU indices) it runs on."""


class BatchQueue:
    """The queue-buildup partition's schedule: first come, first served on 8 GPUs (bn-0, bn-1),
    each job planned when it is submitted (its start is when a GPU frees, never before its
    1-min wait); one 8-GPU sweep from ``buildup`` holding every GPU for ``SWEEP_RUN_S``; a
    submission that would make more than ``MAX_PENDING`` jobs wait is refused, never queued."""

    def __init__(self, t0: float, buildup: float) -> None:
        self.t0, self.buildup = t0, buildup
        self.free = [(t0, node, i) for node in ("bn-0", "bn-1") for i in range(4)]  # (free from, node, index)
        self.planned: list[Planned] = []
        self.k = 0  # the next submission's number
        self.sweep_done = False

    def at(self, ts: float) -> list[Planned]:
        """The jobs in the queue at ``ts`` (pending or running, submitted at or before it)."""
        self._plan_until(ts)
        self.planned = [j for j in self.planned if j.end > ts]  # ended jobs leave the queue for good
        return [j for j in self.planned if j.submit <= ts]

    def _plan_until(self, ts: float) -> None:
        while True:
            submit = self.t0 + self.k * ARRIVE_EVERY_S
            if not self.sweep_done and self.buildup <= submit:
                self._plan_sweep()
                continue
            if submit > ts:
                return
            k, self.k = self.k, self.k + 1
            if sum(1 for j in self.planned if j.submit <= submit < j.start) >= MAX_PENDING:
                continue  # refused: the user submits again later
            self.free.sort()
            free_from, node, idx = self.free.pop(0)
            start = max(submit + WAIT_S, free_from)
            self.free.append((start + RUN_S, node, idx))
            self.planned.append(Planned(f"b{k}", BATCH_USERS[k % len(BATCH_USERS)], 1, submit, start,
                                        start + RUN_S, ((node, (idx,)),)))

    def _plan_sweep(self) -> None:
        """The sweep starts once the jobs started before it have ended, and holds every GPU."""
        self.sweep_done = True
        start = max(self.buildup + WAIT_S + RUN_S, *(f for f, _, _ in self.free))
        end = start + SWEEP_RUN_S
        self.free = [(end, node, i) for _, node, i in self.free]
        alloc = tuple((n, tuple(i for _, m, i in sorted(self.free) if m == n)) for n in ("bn-0", "bn-1"))
        self.planned.append(Planned("sweep", "hana", 8, self.buildup, start, end, alloc))
