"""Scheduler polls in the spool: a job or node stored again only when it changed.

A collector publishes every job and node at every poll (``scheduler.jobs``): the scheduler
stage judges each poll whole, and a job missing from one has left the scheduler's view. On
Kafka that stays so (a worker that starts anywhere reads whole polls). In the spool, history
kept for years of replays, a queue that holds still would be stored again every 30 s, so
:class:`PollCompactor` stores of each poll only the jobs and nodes whose record changed (all of
them but ``ts``) since the cluster's previous poll, before them a :class:`SchedulerRepeat`
naming the others and their places, and every :data:`KEYFRAME_S` of event time a whole poll.
:class:`PollExpander` gives back the whole polls, each record as it was and in its place:
every reader of the spool's scheduler records goes through it (replay, baselines, export,
the console, reports), so what they see is what the live run saw.

A read that starts at ``since`` first reads the scheduler records of the :data:`KEYFRAME_S`
before it (:func:`primed`): a poll after ``since`` repeats only records stored at or after
the last whole poll, which is less than :data:`KEYFRAME_S` before it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.contract import ContractError, NodeCapacity, SchedulerJob, SchedulerPoll, SchedulerRepeat, decode, \
    encode
from gpuwarden.spool import Spool

#: A whole poll is stored at least this often (event time) per cluster: how far back a read
#: starting at a given time reads the scheduler records to know the records its polls repeat.
KEYFRAME_S = 3600.0

Part = SchedulerJob | NodeCapacity
"""A poll's records before its end: its jobs and its nodes."""


def _ident(r: Part) -> tuple[bool, str]:
    return (True, r.job_id) if isinstance(r, SchedulerJob) else (False, r.node)


def _content(r: Part) -> bytes:
    """The record but its time: what must differ for it to be stored again."""
    return encode(r.model_copy(update={"ts": 0.0}))


@dataclass
class _Written:
    """One cluster as the compactor wrote it."""

    held: list[Part] = field(default_factory=list)  # the open poll's records, until its end comes
    stored: dict[tuple[bool, str], bytes] = field(default_factory=dict)  # the last poll's, as stored
    whole_at: float | None = None  # ts of the last whole poll stored


class PollCompactor:
    """What the spool stores of a stream of records: ``store(record)`` gives the records to
    append now (a poll's once its end has come); ``flush()`` those of a poll never ended."""

    def __init__(self) -> None:
        self._clusters: dict[str, _Written] = {}

    def store(self, rec: Any) -> list[Any]:
        if not isinstance(rec, (SchedulerJob, NodeCapacity, SchedulerPoll)):
            return [rec]
        c = self._clusters.setdefault(rec.cluster, _Written())
        out = self._orphans(c) if c.held and c.held[0].ts != rec.ts else []
        if not isinstance(rec, SchedulerPoll):
            c.held.append(rec)
            return out
        if rec.error:  # none were sent; any held are stored as they are
            return [*out, *self._orphans(c), rec]
        held, c.held = c.held, []
        now = {_ident(r): _content(r) for r in held}
        whole = c.whole_at is None or rec.ts >= c.whole_at + KEYFRAME_S
        if whole:
            c.whole_at = rec.ts
        repeat = [] if whole else [i for i, r in enumerate(held) if c.stored.get(_ident(r)) == now[_ident(r)]]
        c.stored = now  # a job gone from this poll and back later is stored again
        if not repeat:
            return [*out, *held, rec]
        again = set(repeat)
        jobs = [i for i in repeat if isinstance(held[i], SchedulerJob)]
        nodes = [i for i in repeat if not isinstance(held[i], SchedulerJob)]
        marker = SchedulerRepeat(ts=rec.ts, cluster=rec.cluster, scheduler=rec.scheduler, simulated=rec.simulated,
                                 jobs=[held[i].job_id for i in jobs], nodes=[held[i].node for i in nodes],
                                 at=[*jobs, *nodes])
        return [*out, marker, *(r for i, r in enumerate(held) if i not in again), rec]

    def flush(self) -> list[Any]:
        return [r for c in self._clusters.values() for r in self._orphans(c)]

    @staticmethod
    def _orphans(c: _Written) -> list[Part]:
        """Records of a poll whose end never came: stored as they are (and compared with no more)."""
        held, c.held = c.held, []
        for r in held:
            c.stored.pop(_ident(r), None)
        return held


@dataclass
class _Reading:
    """One cluster as the expander reads it back."""

    last: dict[tuple[bool, str], Part] = field(default_factory=dict)  # each record's last stored one
    seen: dict[tuple[bool, str], Part] = field(default_factory=dict)  # the open poll's, as given back
    ts: float | None = None  # the open poll's
    due: list[tuple[int, tuple[bool, str]]] = field(default_factory=list)  # (place, record) still to repeat
    place: int = 0  # the open poll's records given back so far


class PollExpander:
    """Whole polls from what :class:`PollCompactor` stored (and spools written before it, whose
    polls are whole already): ``feed(record)`` gives the records to read in its place."""

    def __init__(self) -> None:
        self._clusters: dict[str, _Reading] = {}

    def feed(self, rec: Any) -> list[Any]:
        if not isinstance(rec, (SchedulerJob, NodeCapacity, SchedulerPoll, SchedulerRepeat)):
            return [rec]
        c = self._clusters.setdefault(rec.cluster, _Reading())
        out: list[Any] = []
        if c.ts is not None and rec.ts != c.ts:  # a poll that did not end: what it repeated, then on
            out += self._repeats(c, len(c.due))
            c.ts, c.seen, c.place = None, {}, 0
        if isinstance(rec, SchedulerRepeat):
            c.ts = rec.ts
            c.due = [(at, (i < len(rec.jobs), name))
                     for i, (at, name) in enumerate(zip(rec.at, [*rec.jobs, *rec.nodes], strict=False))]
            c.due.sort()
            return out + self._repeats(c)
        if isinstance(rec, SchedulerPoll):
            out += self._repeats(c, len(c.due))
            if not rec.error:
                c.last = c.seen  # what the poll held: a job that left and comes back is stored again
            c.ts, c.seen, c.place = None, {}, 0
            return [*out, rec]
        key = _ident(rec)
        c.ts = rec.ts
        c.last[key] = c.seen[key] = rec
        c.place += 1
        return [*out, rec, *self._repeats(c)]

    def _repeats(self, c: _Reading, force: int = 0) -> list[Part]:
        """The repeated records whose place has come (and the first ``force`` of them anyway)."""
        out: list[Part] = []
        while c.due and (force > 0 or c.due[0][0] <= c.place):
            force -= 1
            _, key = heapq.heappop(c.due)
            c.place += 1
            last = c.last.get(key)
            if last is None:  # stored before what this read has (evicted, or before its start)
                continue
            again = last.model_copy(update={"ts": c.ts})
            c.seen[key] = again
            out.append(again)
        return out


def expand(records: Iterable[Any], expander: PollExpander | None = None) -> Iterator[Any]:
    """``records`` with every stored poll whole (see :class:`PollExpander`)."""
    ex = PollExpander() if expander is None else expander
    for r in records:
        yield from ex.feed(r)


def primed(spool: Spool, topic: str, since: float | None, until: float | None = None) -> PollExpander:
    """An expander that has read ``topic``'s scheduler records from :data:`KEYFRAME_S` before
    ``since`` up to ``until`` (default ``since``): for a read that starts there."""
    ex = PollExpander()
    if since is None:
        return ex
    for row in spool.read(topic, since=since - KEYFRAME_S, until=since if until is None else until):
        try:
            ex.feed(decode(row.value))
        except ContractError:
            continue
    return ex
