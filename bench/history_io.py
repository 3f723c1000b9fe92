"""How fast history moves: replay sources, export and import, beside the engine they feed.

Usage: .venv/bin/python bench/history_io.py [HOURS] [--kafka HOST:PORT]

Simulates HOURS (default 2) of the ``mixed`` scenario on 2 nodes x 8 GPUs at a
5 s tick, then times, in records per second: decoding the JSONL file, reading the
spool, reading Kafka by time range (with --kafka), the engine over the same
records, export to a history file and import (verify + write) into a fresh spool.
Ratios are against the engine, since a replay is as fast as its slowest stage.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpuwarden.contract import Topics, batch_task_metrics, encode, record_key  # noqa: E402
from gpuwarden.history.portable import HistoryFile, export_history, import_to_spool  # noqa: E402
from gpuwarden.kafka import produce_records  # noqa: E402
from gpuwarden.spool import Spool  # noqa: E402
from gpuwarden.producers.simulator import Simulator  # noqa: E402
from gpuwarden.streams.engine import Engine  # noqa: E402
from gpuwarden.history.sources import input_topics, read_file, read_kafka, read_spool  # noqa: E402


def timed(fn: Callable[[], int]) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - t0


async def to_kafka(bootstrap: str, prefix: str, records: list) -> None:
    await produce_records(records, {"bootstrap_servers": bootstrap}, prefix, partitions=1, event_time=True)


def main() -> None:
    args = sys.argv[1:]
    kafka = args[args.index("--kafka") + 1] if "--kafka" in args else None
    hours = float(next((a for a in args if a.replace(".", "").isdigit() and a != kafka), 2))
    start = time.time() - hours * 3600
    sim = Simulator("mixed", nodes=2, gpus=8, seed=1, start_ts=start, tick_s=5.0)
    records = list(sim.run(hours * 3600))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        jsonl = d / "run.jsonl"
        jsonl.write_bytes(b"".join(encode(r) + b"\n" for r in batch_task_metrics(records)))
        topics = Topics()
        with Spool(d / "a.db") as s:
            s.append_many((topics.for_record(r), record_key(r), r.ts, encode(r)) for r in batch_task_metrics(records))
            rows: dict[str, tuple[int, float]] = {
                "read file (JSONL decode)": timed(lambda: sum(1 for _ in read_file(jsonl))),
                "read spool": timed(lambda: sum(1 for _ in read_spool(s))),
            }
            if kafka:
                prefix = f"bench-{uuid.uuid4().hex[:8]}."
                asyncio.run(to_kafka(kafka, prefix, records))
                rows["read Kafka by time range"] = timed(lambda: len(asyncio.run(read_kafka(
                    {"bootstrap_servers": kafka}, input_topics(prefix), start, None))))
            rows["engine (replay)"] = timed(lambda: (Engine().process_many(records), len(records))[1])
            rows["export (tar + gzip JSONL)"] = timed(lambda: export_history(s, d / "h.tar").records)

        def imp() -> int:
            with HistoryFile(d / "h.tar") as hf, Spool(d / "b.db") as b:
                hf.verify()
                return import_to_spool(hf, b)

        rows["import (verify + write)"] = timed(imp)
        size = (d / "h.tar").stat().st_size
    gpus = sum(len(r.gpus) for r in records if hasattr(r, "gpus"))
    print(f"{len(records)} records ({gpus} GPU-samples), {hours:g} h of mixed on 2x8 GPUs at 5 s; "
          f"history file {size / 1e6:.1f} MB ({size / len(records):.0f} B/record)")
    engine_rate = rows["engine (replay)"][0] / rows["engine (replay)"][1]
    print(f"{'stage':28} {'records/s':>12} {'seconds':>8} {'vs engine':>10}")
    for name, (n, secs) in rows.items():
        rate = n / secs
        print(f"{name:28} {rate:12,.0f} {secs:8.2f} {rate / engine_rate:9.2f}x")


if __name__ == "__main__":
    main()
