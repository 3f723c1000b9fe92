"""The weekly digest carries the scheduler's figures from the spool (jobs, retried, waits, GPU-hours)."""

from __future__ import annotations

from gpuwarden.app.usage import digest_notification
from gpuwarden.contract import JobState as S, Topics, encode
from gpuwarden.history.accounting import compute_usage, weekly_queues
from gpuwarden.spool import Spool
from tests.streams.sched_records import job

NOW = 1_700_600_000.0


class _Settings:
    class kafka:  # noqa: N801 - the one field weekly_queues reads
        topic_prefix = ""


def test_the_digest_says_the_week_of_queues(tmp_path) -> None:
    # Two jobs in partition gpu: one waited 60 s and ran 1 h on 2 GPUs, one waited 1 h and ran
    # 30 min on 4 GPUs, requeued once (a second attempt of 30 min).
    t = NOW - 86400
    recs = [job("a", S.COMPLETED, t + 3660, gpus=2, submit=t, start=t + 60, end_time=t + 3660),
            job("b", S.RUNNING, t + 5400, gpus=4, submit=t, start=t + 3600),
            job("b", S.COMPLETED, t + 9000, gpus=4, submit=t, start=t + 7200, end_time=t + 9000, restarts=1)]
    with Spool(tmp_path / "spool.db") as spool:
        spool.append_many((Topics().jobs, None, r.ts, encode(r)) for r in recs)
        sched = weekly_queues(_Settings(), spool, NOW)  # type: ignore[arg-type]
    usage = compute_usage([], by="user", since=NOW - 7 * 86400, until=NOW)
    n = digest_notification(usage, "team-chat", "", sched)
    summary, note = n.alerts[0].summary, n.alerts[0].evidence.note
    # GPU-hours: a 2 x 1 h, b 4 x 0.5 h + 4 x 0.5 h; waits 60 s and 3600 s: p50 1830 s, p90 3246 s.
    assert "scheduler: 2 jobs, 1 retried, queue wait p50 30 min 30 s / p90 54 min 6 s, 6.0 GPU-hours" in summary
    assert "Scheduler history by partition" in note and "gpu" in note
