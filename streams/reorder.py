"""A reorder buffer: records held in content order until a watermark passes them.

Both stages need results that do not depend on how their inputs were interleaved on
arrival (a stream worker's fetches interleave topics and partitions as they arrive), so each holds records here
and applies them in content order once the caller's watermark says nothing older can
still come: stage 1 per node (``watermark``: the node's newest ts, held back for inputs
still behind), stage 2 per task class (its slowest live contributor, and the gate of
stage 1's progress on Kafka).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Entry(NamedTuple, Generic[T]):
    """One held record. A tuple, so entries sort by ``(ts, order)`` as the buffer needs;
    ``order`` (a tuple of the caller's content key) is unique among the entries held, so
    payloads are never compared."""

    ts: float
    order: tuple
    payload: T


class ReorderBuffer(Generic[T]):
    """Entries sorted by ``(ts, order)``. In-order arrival (the common case) appends; only a
    late-comer is inserted by bisection."""

    __slots__ = ("items",)

    def __init__(self, items: Iterable[tuple[float, tuple, T]] = ()) -> None:
        """``items``: ``(ts, order, payload)`` triples, in any order (a restored state's)."""
        self.items: deque[Entry[T]] = deque(sorted(Entry(*i) for i in items))

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Entry[T]]:
        return iter(self.items)

    def add(self, ts: float, order: tuple, payload: T) -> None:
        items, item = self.items, Entry(ts, order, payload)
        if not items or item > items[-1]:
            items.append(item)
            return
        # A late-comer (a task metric behind the snapshots held) is mostly near the newest: gallop
        # back from the end, then bisect there. A deque reads an index by walking its blocks from
        # the nearer end, so a bisection over the whole of a long buffer starts with the slowest
        # reads; here every read is near the end, and so is the insertion.
        hi, step = len(items) - 1, 1  # item < items[hi]
        lo = hi - step
        while lo > 0 and item < items[lo]:
            hi, step = lo, 2 * step
            lo = hi - step
        items.insert(bisect_right(items, item, max(lo, 0), hi), item)

    def at(self, ts: float) -> Iterator[Entry[T]]:
        """The entries held at ``ts``, in order (found by bisection)."""
        items = self.items
        i, n = bisect_left(items, (ts,)), len(items)
        while i < n and items[i].ts == ts:
            yield items[i]
            i += 1

    def release(self, watermark: float) -> Iterator[Entry[T]]:
        """Remove and yield, oldest first, the entries with ``ts <= watermark``."""
        items = self.items
        while items and items[0].ts <= watermark:
            yield items.popleft()

    def drain(self) -> Iterator[Entry[T]]:
        """Remove and yield every entry, oldest first (the end of a finite input)."""
        items = self.items
        while items:
            yield items.popleft()

    def discard_before(self, floor: float) -> int:
        """Drop the entries with ``ts < floor``; how many."""
        items, n = self.items, 0
        while items and items[0].ts < floor:
            items.popleft()
            n += 1
        return n


def watermark(newest: float, held: float | None, max_skew: float, lateness: float) -> float:
    """Up to which ts a key's records may be released: its ``newest`` ts, held back to ``held``
    (the newest ts of the slowest input still behind, catching up on a backlog; None: none
    is) by at most ``max_skew``, less the allowed ``lateness``."""
    if held is not None:
        newest = min(newest, max(held, newest - max_skew))
    return newest - lateness
