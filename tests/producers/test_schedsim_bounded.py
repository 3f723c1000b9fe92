"""The simulated Slurm queue stays bounded (#33, point 6): ``mixed``'s queue-buildup partition once
queued every job submitted after its sweep for good (a 24 h run held ~700 pending jobs, each sent
at every 30 s poll); now users stop submitting at ``MAX_PENDING`` waiting jobs and the queue
drains after the sweep, while the scenario's alert still fires (tests/streams/test_sched_simulated.py)."""

from __future__ import annotations

from collections import Counter

from gpuwarden.contract import JobState, SchedulerJob
from gpuwarden.producers.schedsim import MAX_PENDING, POLL_S, SWEEP_RUN_S
from gpuwarden.producers.simulator import Simulator

T0 = 1_700_000_000.0
HOUR = 3600.0


def _batch_polls(hours: int) -> dict[float, list[SchedulerJob]]:
    """The batch partition's jobs at each poll of ``hours`` of ``mixed`` (30 s ticks)."""
    sim = Simulator("mixed", nodes=2, gpus=2, seed=3, start_ts=T0, tick_s=POLL_S)
    polls: dict[float, list[SchedulerJob]] = {}
    while sim.ts < T0 + hours * HOUR:
        for r in sim.step():
            if isinstance(r, SchedulerJob) and r.queue == "batch":
                polls.setdefault(r.ts, []).append(r)
    return polls


def test_the_batch_queue_stays_bounded_and_drains_after_the_sweep() -> None:
    polls = _batch_polls(24)
    pending = {ts: sum(j.state == JobState.PENDING for j in jobs) for ts, jobs in polls.items()}
    assert max(pending.values()) == MAX_PENDING  # it builds up to the cap, never past it
    records_per_hour = Counter(int((ts - T0) // HOUR) for ts, jobs in polls.items() for _ in jobs)
    assert max(records_per_hour.values()) <= (MAX_PENDING + 8 + 1) * HOUR / POLL_S  # waiting, running, the sweep
    assert records_per_hour[23] <= records_per_hour[1], records_per_hour  # no growth over the day
    sweep = [ts for ts, jobs in polls.items() if any(j.job_id == "sweep" and j.state == JobState.RUNNING
                                                      for j in jobs)]
    assert max(sweep) - min(sweep) == SWEEP_RUN_S - POLL_S
    after = [p for ts, p in pending.items() if ts > max(sweep) + 2 * HOUR]
    assert after and max(after) <= 1  # drained: a job waits its minute, no longer


def test_a_job_is_never_sent_with_a_start_before_its_one_minute_wait_or_on_a_busy_gpu() -> None:
    for ts, jobs in _batch_polls(6).items():
        held = Counter((n, i) for j in jobs if j.state == JobState.RUNNING
                       for n, idx in j.gpu_indices.items() for i in idx)
        assert all(c == 1 for c in held.values()), (ts, held)
        assert all(j.start_time is None or j.start_time >= j.submit_time + 60 for j in jobs)
