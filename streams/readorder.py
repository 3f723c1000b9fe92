"""Input records are applied in offset order, without gaps, per partition (faust only).

The runner (:mod:`gpuwarden.streams.keyed`) skips a record at or below the offset a key's state
already holds, so a record applied ahead of one not yet read turns the one behind it into
"already applied" when it comes: lost. faust's fetch loop delivers such a record when a rebalance
stops the flow in the middle of a fetch: it drops the fetch's records while the flow is stopped
(advancing its read offset past them) but delivers some of them, and the agent may still take
those in the same generation. Seen in seed-1 random kills (tests/reliability/test_random_kills.py,
1 run in 2): a node's task metrics read at offset 4,824 where 4,250 was next, the 574 between
skipped after the rebalance and two minutes of its step times missing from its summaries.

So a record past the next one expected is set aside (not applied, not acknowledged) and the
partition is read again from the one it misses. Inputs are written by idempotent,
non-transactional producers: their offsets have no gaps of their own.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable


class ReadOrder:
    """Per partition (any hashable key: faust's ``TP``), the next offset to apply."""

    def __init__(self) -> None:
        self.next: dict[Hashable, int] = {}
        self._rewinding: dict[Hashable, int] = {}  # partition -> the offset a seek back went to

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
        self._rewinding.clear()

    def accept(self, tp: Hashable, offset: int) -> bool:
        """Whether the record at ``offset`` may be applied now: the next one, or one read again.
        False: records before it have not come (set it aside and :meth:`rewind`)."""
        want = self.next.get(tp)
        if want is not None and offset > want:
            return False
        self.next[tp] = offset + 1 if want is None else max(want, offset + 1)
        self._rewinding.pop(tp, None)
        return True

    def rewind(self, tp: Hashable) -> int | None:
        """Where to seek ``tp`` back to, or None when a seek there is already under way (records
        fetched before it still come, and are set aside)."""
        want = self.next.get(tp)
        if want is None or self._rewinding.get(tp) == want:
            return None
        self._rewinding[tp] = want
        return want

    def skip_to(self, tp: Hashable, offset: int) -> None:
        """The records before ``offset`` are gone from the broker (retention deleted them before
        they were read): reading goes on from there."""
        self.next[tp] = offset
        self._rewinding.pop(tp, None)

    def rewind_failed(self, tp: Hashable) -> None:
        """The seek did not happen: the next record past a gap asks again."""
        self._rewinding.pop(tp, None)
