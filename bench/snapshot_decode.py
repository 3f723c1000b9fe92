"""Decoding a node snapshot at the stream worker's boundary: ``node_snapshot/2`` (tables as
columns) against the row form it replaced (tables as arrays of row objects), side by side.

The same seeded ``mixed`` snapshots (8-GPU H200 nodes, 1 s ticks) are encoded both ways: /2
decoded with ``gpuwarden.contract.decode`` (full validation, as the workers do), the rows
validated into row objects by ``Rows``, this file's model of the old ``node_snapshot/1``
(never released; the contract no longer reads it). Each is timed ``--repeat`` times,
alternating, and the best pass is kept: this machine's speed drifts, and the best pass is the
least disturbed one.

    .venv/bin/python bench/snapshot_decode.py [--nodes 4] [--minutes 5] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import Field  # noqa: E402

from gpuwarden.contract import GpuProcess, GpuSample, NodeSnapshot, _SnapshotHead, decode, encode  # noqa: E402


class Rows(_SnapshotHead):
    """The row form: GPUs and processes as arrays of row objects."""

    gpus: list[GpuSample] = Field(default_factory=list, max_length=64)
    processes: list[GpuProcess] = Field(default_factory=list, max_length=4096)


def as_rows(snap: NodeSnapshot) -> bytes:
    """The same record in the row form."""
    doc = json.loads(encode(snap))
    doc["gpus"] = [g.model_dump(mode="json") for g in snap.gpus.rows()]
    doc["processes"] = [p.model_dump(mode="json") for p in snap.processes.rows()]
    return json.dumps(doc, separators=(",", ":")).encode()


def pass_us(raws: list[bytes], parse: Callable[[bytes], Any]) -> float:
    """One pass of ``parse`` over ``raws``: µs per record."""
    t = time.perf_counter()
    for raw in raws:
        parse(raw)
    return (time.perf_counter() - t) / len(raws) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--minutes", type=float, default=5)
    ap.add_argument("--repeat", type=int, default=7)
    a = ap.parse_args()
    from engine_throughput import simulate

    snaps = [r for r in simulate("mixed", a.nodes, a.minutes) if isinstance(r, NodeSnapshot)]
    v2 = [encode(s) for s in snaps]
    v1 = [as_rows(s) for s in snaps]
    runs = {"v2": (v2, lambda raw: decode(raw, NodeSnapshot)), "v1_rows": (v1, Rows.model_validate_json)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.repeat):
        for name, (raws, parse) in runs.items():
            times[name].append(pass_us(raws, parse))
    best = {k: min(v) for k, v in times.items()}
    s1, s2 = sum(map(len, v1)) / len(v1), sum(map(len, v2)) / len(v2)
    print(f"snapshot decode: {len(snaps):,} snapshots of {len(snaps[0].gpus)} GPUs ({a.nodes} nodes, "
          f"{a.minutes:g} min, mixed), best of {a.repeat} alternating passes")
    print(f"  node_snapshot/2, columns (agents now)            {best['v2']:7.1f} µs/record   {s2:8,.0f} bytes")
    print(f"  rows (node_snapshot/1), as decoded before /2      {best['v1_rows']:7.1f} µs/record   {s1:8,.0f} bytes")
    print(f"  before /2 over /2: time {best['v1_rows'] / best['v2']:.2f}x, bytes {s1 / s2:.2f}x")
    print(json.dumps({"v2_us": round(best["v2"], 1), "v1_rows_us": round(best["v1_rows"], 1),
                      "time_ratio": round(best["v1_rows"] / best["v2"], 2), "v2_bytes": round(s2),
                      "v1_bytes": round(s1), "bytes_ratio": round(s1 / s2, 2)}))

if __name__ == "__main__":
    main()
