"""Scheduler polls stored on change (gpuwarden/schedpolls.py), on hand-built polls: what is stored, and
that readers get every poll back as it was sent, in its order."""

from __future__ import annotations

from gpuwarden.contract import JobState, NodeCapacity, SchedulerJob, SchedulerPoll, SchedulerRepeat, encode
from gpuwarden.schedpolls import KEYFRAME_S, PollCompactor, expand

T0 = 1_796_529_600.0


def job(ts: float, jid: str, state: JobState = JobState.PENDING, **kw: object) -> SchedulerJob:
    return SchedulerJob(ts=ts, cluster="c1", scheduler="slurm", job_id=jid, user="ana", queue="gpu", state=state,
                        gpus=2, submit_time=T0 - 60, **kw)


def node(ts: float, name: str, allocated: int = 0) -> NodeCapacity:
    return NodeCapacity(ts=ts, cluster="c1", scheduler="slurm", node=name, gpus_total=8, gpus_allocated=allocated)


def poll(ts: float, parts: list, error: str = "") -> list:
    return [*parts, SchedulerPoll(ts=ts, cluster="c1", scheduler="slurm", error=error,
                                  jobs=sum(isinstance(p, SchedulerJob) for p in parts),
                                  nodes=sum(isinstance(p, NodeCapacity) for p in parts))]


def sent() -> list:
    """Polls every 30 s: j1 pends then runs from 60 s, j2 is missing at 90 s and 150 s and comes back
    unchanged at 180 s, an error poll at 120 s, n2 fills at 60 s; a job between the nodes (the order a
    reader must keep)."""
    out = []
    for k in range(8):
        t = T0 + 30 * k
        if k == 4:
            out += poll(t, [], error="squeue: timeout")
            continue
        j1 = job(t, "j1") if k < 2 else job(t, "j1", JobState.RUNNING, start_time=T0 + 60, nodes=["n2"],
                                             gpu_indices={"n2": [0, 1]})
        parts = [j1, node(t, "n1"), *([job(t, "j2")] if k not in (3, 5) else []), node(t, "n2", 2 * (k >= 2))]
        out += poll(t, parts)
    return out


def stored_of(records: list) -> list:
    c = PollCompactor()
    return [s for r in records for s in c.store(r)] + c.flush()


def test_a_record_is_stored_again_only_when_it_changed_and_every_poll_reads_back_whole() -> None:
    records = sent()
    stored = stored_of(records)
    jobs = [(r.ts - T0, r.job_id) for r in stored if isinstance(r, SchedulerJob)]
    # the first poll whole; j1 when it starts; j2 when it comes back (its absence forgot it)
    assert jobs == [(0, "j1"), (0, "j2"), (60, "j1"), (180, "j2")], jobs
    assert [(r.ts - T0, r.node) for r in stored if isinstance(r, NodeCapacity)] == [(0, "n1"), (0, "n2"), (60, "n2")]
    assert [encode(r) for r in expand(stored)] == [encode(r) for r in records]


def test_a_whole_poll_each_keyframe_lets_a_read_that_lost_the_head_come_right() -> None:
    """The oldest records evicted (or a read that starts late, unprimed): the polls that repeat what
    it lost come back short until the next whole poll; from there on every one is exact."""
    records = []
    for k in range(int(2 * KEYFRAME_S / 30)):
        t = T0 + 30 * k
        records += poll(t, [job(t, "j1"), node(t, "n1")])
    stored = stored_of(records)
    whole = [r.ts for r in stored if isinstance(r, SchedulerJob)]
    assert whole == [T0, T0 + KEYFRAME_S]
    lost = [r for r in stored if r.ts >= T0 + 60]
    back = list(expand(lost))
    at = next(i for i, r in enumerate(records) if r.ts == T0 + KEYFRAME_S)
    assert [encode(r) for r in back if r.ts >= T0 + KEYFRAME_S] == [encode(r) for r in records[at:]]
    assert not any(isinstance(r, SchedulerJob) for r in back if r.ts < T0 + KEYFRAME_S)  # short, never wrong


def test_records_of_a_poll_that_never_ended_are_stored_as_they_are() -> None:
    t = T0 + 30
    first = poll(T0, [job(T0, "j1")])
    cut = [job(t, "j1")]  # its scheduler_poll/1 never came (the collector died)
    then = poll(t + 30, [job(t + 30, "j1")])
    stored = stored_of([*first, *cut, *then])
    assert [r.ts for r in stored if isinstance(r, SchedulerJob)] == [T0, t, t + 30]
    assert not any(isinstance(r, SchedulerRepeat) for r in stored)
    assert [encode(r) for r in expand(stored)] == [encode(r) for r in [*first, *cut, *then]]
