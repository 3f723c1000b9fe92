"""Engine cost of the inference stage per record, against decoding the same records and stage 1
per node snapshot, in the same run.

One simulated vLLM service (producers/servingsim.py) with the SLO of docs/inference.md: 3 days of
history at one record a minute fill every window (3 d burn window, 30 d budget so far), then 6 h at
one record per 15 s (the agent's default scrape) are timed: (a) ``decode`` of each record's wire
bytes (what a worker pays before any stage); (b) ``InferenceStage.process`` of the decoded records
(reorder, windows, the rules at each minute close); (c) the peer: ``NodeStage.process`` of a
simulated 8-GPU node's snapshots over the same 6 h at 15 s. CPU of this process.

Usage: .venv/bin/python bench/inference_stage.py
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from gpuwarden.contract import InferenceMetrics, NodeSnapshot, decode, encode  # noqa: E402
from gpuwarden.producers.servingsim import SLO, ServingSim  # noqa: E402
from gpuwarden.producers.simulator import Simulator  # noqa: E402
from gpuwarden.streams.config import EngineConfig  # noqa: E402
from gpuwarden.streams.engine import Engine  # noqa: E402
from gpuwarden.streams.inferencestage import InferenceStage  # noqa: E402

START = 1_700_000_000.0
HISTORY_S, TIMED_S = 3 * 86400.0, 6 * 3600.0


def records(sim: ServingSim, until: float, step: float, seq: int) -> list[InferenceMetrics]:
    out, ts = [], sim.next_ts
    while ts <= until:
        sim.scrape_s = step
        rec = sim.scrape(ts, seq + len(out))
        if rec is not None:
            out.append(rec)
        ts += step
    return out


def main() -> None:
    cfg = EngineConfig.model_validate({"slo": {"chat": SLO}, "serving": {"chat": {"max_batch": 256}}})
    stage = InferenceStage(cfg)
    sim = ServingSim("serving-healthy", node="gn1", boot_id="b", seed=1, start_ts=START, pid=1, gpus=[0, 1],
                     scrape_s=60.0)
    for r in records(sim, START + HISTORY_S, 60.0, 0):
        stage.process(r)
    timed = records(sim, START + HISTORY_S + TIMED_S, 15.0, 10**6)
    wire = [encode(r) for r in timed]
    c0 = time.process_time()
    decoded = [decode(w, InferenceMetrics) for w in wire]
    c1 = time.process_time()
    out = [t for r in decoded for t in stage.process(r)]
    c2 = time.process_time()
    node = Simulator("healthy", nodes=1, gpus=8, seed=1, start_ts=START, tick_s=15.0)
    snaps = [r for r in node.run(TIMED_S) if isinstance(r, NodeSnapshot)]
    peer = Engine(config=EngineConfig())
    c3 = time.process_time()
    for s in snaps:
        peer.nodes.process(s)
    c4 = time.process_time()
    n = len(decoded)
    per_decode, per_stage, per_snap = (c1 - c0) / n * 1e3, (c2 - c1) / n * 1e3, (c4 - c3) / len(snaps) * 1e3
    size = sum(map(len, wire)) / n
    print(f"records: {n} (one service, 6 h at 15 s, after 3 d of history); {size / 1024:.1f} KiB each on the wire")
    print(f"(a) decode:                    {per_decode:.3f} ms CPU per record")
    print(f"(b) inference stage (process): {per_stage:.3f} ms CPU per record "
          f"({per_stage * 4:.2f} ms per service-minute: 4 records and one rules run)")
    print(f"(c) peer, stage 1 per 8-GPU snapshot: {per_snap:.3f} ms CPU")
    print(f"transitions: {len(out)}; state {len(stage.dump('gn1')) / 1024:.0f} KiB per node with one service")
    print(f"one service at 15 s: {(per_decode + per_stage) / 1000 / 15 * 100:.4f} % of a core")
    print(json.dumps({"decode_ms": round(per_decode, 4), "stage_ms": round(per_stage, 4),
                      "stage1_snapshot_ms": round(per_snap, 4), "state_kib": round(len(stage.dump("gn1")) / 1024)}))


if __name__ == "__main__":
    main()
