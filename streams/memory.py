"""Collector settings and heap trimming for stream worker processes.

CPython's cyclic collector runs a young collection every 700 net container allocations
and, every 100 of those, a full one that walks every tracked object. Decoding one 8-GPU
snapshot allocates ~500 containers, so a worker ran a young collection every snapshot or
two and a full one every few seconds, each walking start-up's ~80k objects (modules,
pydantic schemas, the Kafka clients) and the engine's windows: 18 % of the stream worker's CPU
in ``bench/streams_throughput.py`` (b). The engine's records and window entries are
acyclic, so reference counting frees them; the collector is only there for rare cycles
and can run far less often. (In ``gpuwarden run`` and replay the collector took under 1 % of
the engine's time: left alone there.)
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time

log = logging.getLogger("gpuwarden.streams")

#: Net container allocations between young collections (CPython's default: 700). At 20,000 the
#: collector took ~5 % of a worker's CPU on bench/worker_memory.py's catch-up (0.70 s of 14 s
#: replaying its node batches in-process), at 50,000 ~2.6 % (0.37 s: 11 young collections, not 53).
YOUNG_THRESHOLD = 50_000


def tune_gc() -> None:
    """Call once start-up is done: what exists now moves to the permanent generation
    (full collections skip it), and young collections run every ``YOUNG_THRESHOLD``."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


class HeapTrim:
    """Hands the memory a catch-up freed back to the system once the worker is idle.

    Catching up, a worker decompresses whole fetches (4 MiB per partition on the wire, ~37x
    that as zstd JSON): a worker that read a 2-hour backlog of 64 GPUs peaked at ~550 MB and
    still held ~420 MB once caught up, though its Python objects were ~50 MB (tracemalloc)
    and its checkpointed state ~20 kB per node. glibc's malloc keeps freed memory in its
    arenas (aiokafka's fetcher thread has its own); ``malloc_trim(0)`` returns it: ~127 MB
    (bench/worker_memory.py, docs/benchmarks.md). So: after ``MIN_RECORDS`` records, at the
    first idle fetch, at most every ``EVERY_S``. A no-op where libc has no malloc_trim."""

    MIN_RECORDS = 20_000
    EVERY_S = 30.0

    def __init__(self) -> None:
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name) if name else None
        self._trim = getattr(libc, "malloc_trim", None)
        self._records = 0
        self._last = float("-inf")

    def busy(self, records: int) -> None:
        self._records += records

    def idle(self) -> None:
        if self._trim is None or self._records < self.MIN_RECORDS:
            return
        now = time.monotonic()
        if now - self._last < self.EVERY_S:
            return
        self._last, self._records = now, 0
        self._trim(0)
        log.debug("heap trimmed after a busy spell")
