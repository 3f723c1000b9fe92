"""Collector settings for stream worker processes.

CPython's cyclic collector runs a young collection every 700 net container allocations
and, every 100 of those, a full one that walks every tracked object. Decoding one 8-GPU
snapshot allocates ~500 containers, so a worker ran a young collection every snapshot or
two and a full one every few seconds, each walking start-up's ~80k objects (modules,
pydantic schemas, the faust app) and the engine's windows: 18 % of the stream worker's CPU
in ``bench/streams_throughput.py`` (b). The engine's records and window entries are
acyclic, so reference counting frees them; the collector is only there for rare cycles
and can run far less often. (In ``gpuwarden run`` and replay, without faust's objects, the
collector took under 1 % of the engine's time: left alone there.)
"""

from __future__ import annotations

import gc

#: Net container allocations between young collections (CPython's default: 700).
YOUNG_THRESHOLD = 20_000


def tune_gc() -> None:
    """Call once start-up is done: what exists now moves to the permanent generation
    (full collections skip it), and young collections run every ``YOUNG_THRESHOLD``."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
