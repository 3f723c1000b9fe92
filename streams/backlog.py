"""Which of a node's inputs still have records to come, record by record through a fetch.

Stage 1 holds a node's watermark back to the newest ts of each input that is
still catching up (``NodeStage.process(record, behind)``), so a topic whose
fetch ran ahead (task metrics are small: a fetch can hold hours of them) does
not release a node's buffer past samples that were not read yet. Judging that
once per fetch, at its end, is wrong for the records inside it: at the first
sample of a fetch the samples after it are not in the node's buffer yet, and a
metric hours ahead would release the buffer past them (they were then dropped
as late after a takeover). So an input counts as behind for a record while its
partition has records of the same node (the record key) later in the same fetch, or
any records past the fetch's end (their keys are not known yet). Judged per partition
instead of per node, a node with no events of its own was held up to ``max_source_skew``
whenever its partition-mates' events came later in the fetch: a whole backlog sat
decoded in its reorder buffer (the worker's memory while catching up, and twice the
decode cost: fresh memory for every record instead of reused).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NONE: frozenset[int] = frozenset()


Key = bytes | None


class Backlog:
    """Per partition and key, the source ranks with records still to come during one fetch."""

    def __init__(self, ranks: Mapping[str, int]) -> None:
        self.ranks = ranks
        self._last: dict[tuple[str, int, Key], int] = {}
        self._pending: dict[tuple[int, Key], set[int]] = {}
        self._beyond: dict[int, frozenset[int]] = {}

    def start(self, last: Mapping[tuple[str, int, Key], int], beyond: Mapping[int, Iterable[int]]) -> None:
        """A new fetch: ``last`` is the last offset fetched per (topic, partition, key);
        ``beyond`` the ranks per partition with records past what was fetched. Partitions
        not in ``beyond`` keep what their last fetch left (a node there may still be held)."""
        self._beyond.update((p, frozenset(r)) for p, r in beyond.items())
        self._pending = {}
        self._last = {}
        for (topic, p, key), offset in last.items():
            rank = self.ranks[topic]
            pend = self._pending.get((p, key))
            if pend is None:
                pend = self._pending[p, key] = set(self._beyond.get(p, NONE))
            if rank not in pend:  # caught up once its last fetched record is applied
                self._last[topic, p, key] = offset
            pend.add(rank)

    def behind_at_end(self, partition: int) -> frozenset[int]:
        """The ranks still behind once the whole fetch is read: those with records past it."""
        return self._beyond.get(partition, NONE)

    def behind(self, topic: str, partition: int, offset: int, key: Key) -> set[int] | frozenset[int]:
        """The ranks behind when the record at ``offset`` (Kafka key ``key``: its node) is
        applied; its own rank drops out at the key's last fetched record of its topic. A
        record never applied (dead-lettered, already in a restored state) leaves its rank
        pending until the next fetch: held longer, never released early."""
        pend = self._pending.get((partition, key))
        if pend is None:  # none of its ranked inputs in this fetch (an allocation): those past the fetch
            return self._beyond.get(partition, NONE)
        if self._last.get((topic, partition, key)) == offset:
            pend.discard(self.ranks[topic])
        return pend
