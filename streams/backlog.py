"""Which of a partition's inputs still have records to come, record by record through a fetch.

Stage 1 holds a node's watermark back to the newest ts of each input that is
still catching up (``NodeStage.process(record, behind)``), so a topic whose
fetch ran ahead (task metrics are small: a fetch can hold hours of them) does
not release a node's buffer past samples that were not read yet. Judging that
once per fetch, at its end, is wrong for the records inside it: at the first
sample of a fetch the samples after it are not in the node's buffer yet, and a
metric hours ahead would release the buffer past them (they were then dropped
as late after a takeover). So an input counts as behind for a record while its
partition has records later in the same fetch, or past the fetch's end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NONE: frozenset[int] = frozenset()


class Backlog:
    """Per partition, the source ranks with records still to come during one fetch."""

    def __init__(self, ranks: Mapping[str, int]) -> None:
        self.ranks = ranks
        self._last: dict[tuple[str, int], int] = {}
        self._pending: dict[int, set[int]] = {}
        self._beyond: dict[int, frozenset[int]] = {}

    def start(self, last: Mapping[tuple[str, int], int], beyond: Mapping[int, Iterable[int]]) -> None:
        """A new fetch: ``last`` is the last offset fetched per (topic, partition); ``beyond``
        the ranks per partition with records past what was fetched. Partitions not in
        ``beyond`` keep what their last fetch left (a node there may still be held)."""
        self._beyond.update((p, frozenset(r)) for p, r in beyond.items())
        self._pending = {p: set(r) for p, r in beyond.items()}
        self._last = {}
        for (topic, p), offset in last.items():
            rank = self.ranks[topic]
            pend = self._pending.setdefault(p, set())
            if rank not in pend:  # caught up once its last fetched record is applied
                self._last[topic, p] = offset
            pend.add(rank)

    def behind_at_end(self, partition: int) -> frozenset[int]:
        """The ranks still behind once the whole fetch is read: those with records past it."""
        return self._beyond.get(partition, NONE)

    def behind(self, topic: str, partition: int, offset: int) -> set[int] | frozenset[int]:
        """The ranks behind when the record at ``offset`` is applied (its own rank drops out
        at its topic's last fetched record). A record never applied (dead-lettered, already
        in a restored state) leaves its rank pending until the next fetch: held longer, never
        released early."""
        pend = self._pending.get(partition)
        if pend is None:
            return NONE
        if self._last.get((topic, partition)) == offset:
            pend.discard(self.ranks[topic])
        return pend
