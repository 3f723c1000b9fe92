"""Input records are applied in offset order, without gaps, per partition (faust only).

The runner (:mod:`gpuwarden.streams.keyed`) skips a record at or below the offset a key's state
already holds, so a record applied ahead of one not yet read turns the one behind it into
"already applied" when it comes: lost. faust's fetch loop delivers such a record when a rebalance
stops the flow in the middle of a fetch: it drops the fetch's records while the flow is stopped
(advancing its read offset past them) but delivers some of them, and the agent may still take
those in the same generation. Seen in seed-1 random kills (tests/reliability/test_random_kills.py,
1 run in 2): a node's task metrics read at offset 4,824 where 4,250 was next, the 574 between
skipped after the rebalance and two minutes of its step times missing from its summaries.

A second way to the same loss (1 run in 3 after the first was closed): a batch taken just as a
rebalance began is refused (not applied), and its records come again after it; counted as read
anyway, a stale record past them that came first was applied, and they were skipped.

So a record past the next one to apply is set aside (not applied, not acknowledged) and the
partition is read again from the one it misses, and only records a stage really ran move the
next offset. Inputs are written by idempotent,
non-transactional producers: their offsets have no gaps of their own.

A seek back can itself be foiled: faust's fetch loop goes on handing out the records of a fetch
made before the seek, each moving its read offset past the gap again, and it then drops the
records read again from the seek's offset as below that read offset. Seen after a takeover in
tests/streams_kafka/test_failover.py (1 run in 7): eight partitions sought back at once, then
nothing applied for 70 s. So a gap still open ``patience_s`` after its seek is sought again.

And records can vanish between faust's fetch and the agent with nothing past them to show the
gap: at the end of an input no later record comes. Seen after takeovers under load
(tests/reliability/test_worker_kill.py, 1 run in 12): the survivor's first batch held a node's
XID events 0-80 of 96, faust's read offset for the partition stood at 95, and 81-95 never came
to the agent; the node stage then waited for that input for good (no transition after the
takeover). The likely route: faust's stream queues are cleared whenever it resumes the flow
(``clear_on_resume``), and at a recovery's end it resumes after un-pausing the inputs, when its
fetch loop may already have handed them records. So a partition whose broker end lies past the
next record to apply, and from which nothing came for ``patience_s``, is sought back too
(:meth:`ReadOrder.stalled`, asked every few seconds whatever else comes).
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping

log = logging.getLogger(__name__)

#: How long a gap may stay open before the partition is sought back to it (wall seconds).
PATIENCE_S = 10.0


class ReadOrder:
    """Per partition (any hashable key: faust's ``TP``), the offset after the last record applied.

    Only records a stage really ran count (:meth:`applied`, after the batch was applied): a batch
    refused because a rebalance began (``streams/topology.py``) moves nothing, so its records,
    read again, are the next ones and not "read again" (they were once taken for that: a stale
    record past them came first and was applied, and they were then skipped as applied)."""

    def __init__(self, patience_s: float = PATIENCE_S) -> None:
        self.next: dict[Hashable, int] = {}
        self.patience_s = patience_s
        self._gap_since: dict[Hashable, tuple[int, float]] = {}  # partition -> (offset missing, first seen)
        self._rewinding: dict[Hashable, tuple[int, float]] = {}  # partition -> (offset sought, when)
        self._arrived: dict[Hashable, float] = {}  # partition -> when a record of it last came

    def start(self, tp: Hashable, offset: int) -> None:
        """Reading (re)starts at ``offset`` (the committed offset, or the beginning). A partition
        this worker kept through a rebalance keeps the offset it had got to: what comes from the
        committed offset up to there is read again, and the runner skips what a key holds."""
        self.next.setdefault(tp, offset)

    def forget(self, tps: Iterable[Hashable] | None = None) -> None:
        """Partitions moved away (all of them: None). Seeks under way are void either way: faust
        seeks every partition after a rebalance."""
        for tp in list(self.next) if tps is None else tps:
            self.next.pop(tp, None)
            self._arrived.pop(tp, None)
        self._rewinding.clear()
        self._gap_since.clear()

    def batch(self) -> BatchOrder:
        """The check for one batch's records."""
        return BatchOrder(self)

    def applied(self, tp: Hashable, next_offset: int) -> None:
        """A batch's records of ``tp`` up to ``next_offset`` were applied."""
        self.next[tp] = max(self.next.get(tp, next_offset), next_offset)
        if self._rewinding.get(tp, (next_offset, 0.0))[0] < next_offset:
            log.info("%s: read again from %d, applied up to %d", tp, self._rewinding.pop(tp)[0],
                     next_offset - 1)
        if self._gap_since.get(tp, (next_offset, 0.0))[0] < next_offset:
            del self._gap_since[tp]

    def rewind(self, tp: Hashable, now: float) -> int | None:
        """Where to seek ``tp`` back to (wall clock ``now``), or None: not yet, or a seek there is
        under way. The causes known (a rebalance) end in faust's own seek to the committed offsets,
        which brings the missing records again, and a seek of ours while faust's consumer thread
        hands out a fetch can crash it (aiokafka's fetcher: ``KeyError`` in ``fetched_records``, 1
        run in 4 when every partition was seeked at each rebalance's end): so only a gap still open
        after ``patience_s`` is sought, and sought again each ``patience_s`` it stays open."""
        want = self.next.get(tp)
        if want is None:
            return None
        sought, at = self._rewinding.get(tp, (None, 0.0))
        if sought == want:
            if now - at < self.patience_s:
                return None
        else:
            missing, since = self._gap_since.setdefault(tp, (want, now))
            if missing != want:
                self._gap_since[tp] = (want, now)
                return None
            if now - since < self.patience_s:
                return None
        self._rewinding[tp] = (want, now)
        return want

    def arrived(self, tps: Iterable[Hashable], now: float) -> None:
        """Records of ``tps`` came (applied or set aside), at wall clock ``now``."""
        for tp in tps:
            self._arrived[tp] = now

    def stalled(self, ends: Mapping[Hashable, int], now: float) -> set[Hashable]:
        """Partitions to seek back now: records up to ``ends`` (the broker's end offsets) exist
        past the next one to apply and nothing came from the partition for ``patience_s``. A
        partition first asked about counts from ``now``. Each is booked as a gap that has
        waited out its patience, so :meth:`rewind` seeks it (and again each ``patience_s``)."""
        out = set()
        for tp, end in ends.items():
            want = self.next.get(tp)
            if want is None or end <= want:
                continue
            if now - self._arrived.setdefault(tp, now) < self.patience_s:
                continue
            self._gap_since[tp] = (want, now - self.patience_s)
            out.add(tp)
        return out

    def skip_to(self, tp: Hashable, offset: int) -> None:
        """The records before ``offset`` are gone from the broker (retention deleted them before
        they were read): reading goes on from there."""
        self.next[tp] = offset
        self._rewinding.pop(tp, None)
        self._gap_since.pop(tp, None)

    def rewind_failed(self, tp: Hashable) -> None:
        """The seek did not happen: the next record past a gap asks again."""
        self._rewinding.pop(tp, None)


class BatchOrder:
    """One batch: which of its records may be applied, in the order they came."""

    def __init__(self, order: ReadOrder) -> None:
        self.order = order
        self.want: dict[Hashable, int] = {}
        self.gaps: set[Hashable] = set()

    def accept(self, tp: Hashable, offset: int) -> bool:
        """Whether the record at ``offset`` may be applied: the next one, or one applied before.
        False: records before it have not come (it is set aside, and ``tp`` is in ``gaps``)."""
        want = self.want.get(tp, self.order.next.get(tp))
        if want is not None and offset > want:
            self.gaps.add(tp)
            return False
        self.want[tp] = offset + 1 if want is None else max(want, offset + 1)
        return True

    def applied(self, tps: Iterable[Hashable]) -> None:
        """The batch's records of ``tps`` were applied."""
        for tp in tps:
            if tp in self.want:
                self.order.applied(tp, self.want[tp])
