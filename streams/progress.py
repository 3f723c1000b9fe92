"""Stage 1 → stage 2 progress: a watermark over stage 1's input partitions (Kafka only); and
the scheduler stage → stage 1 progress, the same way.

Stage 2 applies a task class's summaries in content order (ts, node, task id) and must not
apply one before every summary that sorts ahead of it has arrived. In one process that is
easy (summaries come in the order stage 1 makes them); on Kafka a class's summaries come from
every stage-1 partition, read by different workers at different speeds (a backlog, a worker
taking over another's partitions), and a node stage 2 has not heard from yet could still send
one dated earlier. So each stage-1 partition reports how far it has got: after the summaries
of a batch, stage 1 sends a :class:`gpuwarden.contract.StageProgress` to *every*
``task.summaries`` partition, behind those summaries on the same partitions. A stage-2 worker
that has read partition ``p``'s report with watermark ``w`` has read every summary from ``p``
dated ``<= w``; its :class:`Gate` is the minimum over all stage-1 partitions, and a class's
head is released only once the gate has passed it.

Bounds, so a dead input cannot hold stage 2 forever: a partition that reports no nodes and no
backlog is empty (not waited for); a caught-up partition holds the gate at most
``summary_lateness`` behind the newest report (its nodes went silent), one still catching up
(or never heard from) at most ``max_source_skew`` behind. Within a partition, a caught-up node more than
``summary_lateness`` behind the partition's newest does not hold the partition's watermark.

The scheduler stage reports its ``scheduler.jobs`` partitions to every ``scheduler.allocations``
partition the same way (``nodes``: the clusters it holds there, the watermark: the last poll
closed), behind the job allocations it sent: stage 1 judges the allocation-dependent rule
(``job-gpus-unused``) of a node at an instant only once the gate of the node's partition has
passed it (:meth:`Gate.through`: or the node's own time has run the bound past it), so after a
backlog the allocations apply at their event time, not at their arrival (issue #19). In one
process allocations come in event order with the samples: ``OPEN``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from gpuwarden.contract import ContractError, StageProgress
from gpuwarden.streams.dlq import Consumed, Limits, Outbound, decode_inbound, to_dlq

#: Kafka header on progress records in ``task.summaries`` (summaries themselves carry none).
HEADER = "gw-progress"
HEADERS = ((HEADER, b"1"),)


def is_progress(headers: Iterable[tuple[str, bytes]] | None) -> bool:
    """Whether a ``task.summaries`` record (by its Kafka headers) is a progress report."""
    return any(k == HEADER for k, _ in headers or ())


def partition_watermark(positions: Iterable[tuple[float, float]], catching_up: bool,
                        lateness: float) -> float | None:
    """How far one input partition's stage 1 has made summaries: the minimum over its nodes of
    the last record each released (a node's summaries up to there are made), from
    ``(released, newest)`` per node. Caught up, a node more than ``lateness`` behind the
    partition's newest is left out (gone silent). None: no node has released anything."""
    positions = list(positions)
    if not positions:
        return None
    newest = max(n for _, n in positions)
    floor = min(r for r, n in positions if catching_up or n >= newest - lateness)
    return None if floor == -math.inf else floor


class Reporter:
    """Stage 1: decides when a partition's progress is worth sending. A report goes out when
    it changes what stage 2 may release (the summary interval the watermark is in, the
    catching-up flag, empty or not), and every ``resend_s`` of wall time regardless. Stage 2's
    gates are in its snapshots, so a takeover restores what was heard; the resend is a safety
    net, and rare on purpose: each one is a transaction in the sender and in every reader task
    (at 2 s they were most of a quiet worker's CPU; at 30 s still ~1 ms of CPU per second of
    a worker with nothing to do: docs/benchmarks.md, live cost)."""

    def __init__(self, interval_s: float, resend_s: float = 300.0) -> None:
        self.interval_s = interval_s
        self.resend_s = resend_s
        self._sent: dict[int, tuple[tuple, float]] = {}  # partition -> (what, wall)

    def due(self, progress: StageProgress, wall: float) -> bool:
        w = progress.watermark
        what = (None if w is None else math.floor(w / self.interval_s), progress.catching_up, progress.nodes > 0)
        last = self._sent.get(progress.partition)
        if last is not None and last[0] == what and wall - last[1] < self.resend_s:
            return False
        self._sent[progress.partition] = (what, wall)
        return True

    def forget(self) -> None:
        """Partitions moved: report every partition afresh."""
        self._sent.clear()


class AllocationGate(Protocol):
    """What stage 1's allocation join reads of a gate: ``through(newest)``, how far a node whose
    newest record is at ``newest`` may be judged."""

    def through(self, newest: float) -> float: ...


class _Open:
    """One process: allocations come in event order with the samples, nothing to wait for."""

    @staticmethod
    def through(newest: float) -> float:
        return math.inf


OPEN: AllocationGate = _Open()


@dataclass
class _Heard:
    watermark: float  # -inf: no node read yet
    catching_up: bool
    empty: bool


class Gate:
    """Stage 2, one per ``task.summaries`` partition: the watermark over stage 1's ``sources``
    input partitions, from the progress reports read on that partition."""

    def __init__(self, sources: int, lateness: float, skew: float) -> None:
        self.sources = sources
        self.lateness = lateness
        self.skew = skew
        self._heard: dict[int, _Heard] = {}
        self.value = -math.inf

    def update(self, progress: StageProgress) -> bool:
        """Take one report; True if the gate moved on. Watermarks only rise: a worker that took a
        partition over restarts from its last checkpoint and reports lower, but what it makes
        again up to the higher mark was made (and read) before."""
        w = -math.inf if progress.watermark is None else progress.watermark
        old = self._heard.get(progress.partition)
        if old is not None:
            w = max(w, old.watermark)
        self._heard[progress.partition] = _Heard(w, progress.catching_up,
                                                 progress.nodes == 0 and not progress.catching_up)
        before, self.value = self.value, self._floor()
        return self.value > before

    def through(self, newest: float) -> float:
        """Stage 1's allocation join (the gate over the scheduler stage's partitions): how far a
        node whose newest record is at ``newest`` may judge, at most the bound behind it when the
        scheduler is silent or absent (every partition empty: ``lateness``) or, while any
        partition catches up or was never heard from, ``skew``."""
        heard = self._heard
        waiting = len(heard) < self.sources or any(h.catching_up for h in heard.values())
        released = self.value if self.value < math.inf else -math.inf  # no cluster anywhere: none released
        return max(released, newest - (self.skew if waiting else self.lateness))

    def dump(self) -> dict:
        """What the gate has heard, for a task's snapshot (a replay from it then releases exactly
        what the run it replays released)."""
        return {"heard": [[p, _num(h.watermark), h.catching_up, h.empty] for p, h in sorted(self._heard.items())],
                "value": _num(self.value)}

    def load(self, data: dict) -> None:
        self._heard = {int(p): _Heard(_inf(w), bool(c), bool(e)) for p, w, c, e in data["heard"]}
        self.value = _inf(data["value"])

    def _floor(self) -> float:
        """The minimum over the partitions of their watermarks, each held no further back than
        its bound behind the newest (so a silent or dead partition delays, never stops)."""
        heard = self._heard
        marks = [h.watermark for h in heard.values() if not h.empty]
        newest = max(marks, default=-math.inf)
        if newest == -math.inf:
            # Nothing read anywhere yet: wait, unless every partition said it is empty.
            return math.inf if len(heard) == self.sources and not marks else -math.inf
        floor = math.inf
        for p in range(self.sources):
            h = heard.get(p)
            if h is None:
                w, bound = -math.inf, self.skew  # not heard from yet: as if catching up
            elif h.empty:
                continue
            else:
                w, bound = h.watermark, self.skew if h.catching_up else self.lateness
            floor = min(floor, max(w, newest - bound))
        return floor


def _num(x: float) -> float | str:
    """JSON for a watermark: strict JSON has no infinities."""
    return x if math.isfinite(x) else ("inf" if x > 0 else "-inf")


def _inf(x: float | str) -> float:
    return float(x)


def read_reports(reports: Iterable[Consumed], gate: Callable[[int], Gate], limits: Limits,
                 dlq_topic: str | None = None) -> tuple[set[int], list[Outbound]]:
    """Progress reports read on their partitions move those partitions' gates: the partitions
    whose gate moved on, and the dead letters of malformed reports."""
    moved: set[int] = set()
    letters: list[Outbound] = []
    for r in reports:
        try:
            report = decode_inbound(r, StageProgress, limits, key_of=None)
        except ContractError as e:
            letters.append(to_dlq(r, str(e), dlq_topic=dlq_topic, max_bytes=limits.max_bytes))
            continue
        if gate(r.partition).update(report):
            moved.add(r.partition)
    return moved, letters
