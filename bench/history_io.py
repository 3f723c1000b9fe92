"""How fast history moves and how much disk it takes: replay sources, export and import beside
the engine they feed; the demo's spool beside a Prometheus TSDB of the same series.

Usage: .venv/bin/python bench/history_io.py [HOURS] [--kafka HOST:PORT] [--only io|storage]

io: simulates HOURS (default 2) of the ``mixed`` scenario on 2 nodes x 8 GPUs at a
5 s tick, then times, in records per second: decoding the JSONL file, reading the
spool, reading Kafka by time range (with --kafka), the engine over the same
records, export to a history file and import (verify + write) into a fresh spool.
Ratios are against the engine, since a replay is as fast as its slowest stage.

storage: runs ``gpuwarden demo --simulate`` (its 6 h of the demo's mix) and reports the
spool's size on disk, everything in the file included, per GPU-sample and per GPU-day,
beside the same records and state written in the previous (row per record) format and a
Prometheus TSDB (Debian's ``promtool``) backfilled with what the agents' ``/metrics``
serves for the same records, in the same run.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpuwarden.contract import NodeSnapshot, Topics, batch_task_metrics, decode, encode, record_key  # noqa: E402
from gpuwarden.exposition import exposition  # noqa: E402
from gpuwarden.history.portable import HistoryFile, export_history, import_to_spool  # noqa: E402
from gpuwarden.kafka import produce_records  # noqa: E402
from gpuwarden.producers.metrics import COUNTERS, AgentMetrics  # noqa: E402
from gpuwarden.schedpolls import expand  # noqa: E402
from gpuwarden.spool import Spool, SpoolRecord  # noqa: E402
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
    only = args[args.index("--only") + 1] if "--only" in args else None
    if only != "storage":
        throughput(args)
    if only != "io":
        with tempfile.TemporaryDirectory() as tmp:
            storage(Path(tmp))


def throughput(args: list[str]) -> None:
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
            s.append_many(((topics.for_record(r), record_key(r), r.ts, encode(r)) for r in batch_task_metrics(records)),
                          published=True)
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
    gpus = sum(len(r.gpus.index) for r in records if isinstance(r, NodeSnapshot))
    print(f"{len(records)} records ({gpus} GPU-samples), {hours:g} h of mixed on 2x8 GPUs at 5 s; "
          f"history file {size / 1e6:.1f} MB ({size / len(records):.0f} B/record)")
    engine_rate = rows["engine (replay)"][0] / rows["engine (replay)"][1]
    print(f"{'stage':28} {'records/s':>12} {'seconds':>8} {'vs engine':>10}")
    for name, (n, secs) in rows.items():
        rate = n / secs
        print(f"{name:28} {rate:12,.0f} {secs:8.2f} {rate / engine_rate:9.2f}x")


# --------------------------------------------------------------------------- storage

OPENMETRICS = "application/openmetrics-text; version=1.0.0"


def on_disk(path: Path) -> int:
    """A SQLite file with its WAL and shared-memory files, or a directory's files."""
    if path.is_dir():
        return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())


def spool_parts(path: Path) -> dict[str, int]:
    """Where the spool file's bytes are: record rows, blocks, key/value state (engine and
    notifier), free pages; each table with its indexes (SQLite's dbstat)."""
    with closing(sqlite3.connect(path)) as db:
        pages = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"))
        page = db.execute("PRAGMA page_size").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0] * page
    owner = {"records_topic_ts": "records", "records_pending": "records", "blocks_topic_span": "blocks",
             "blocks_span": "blocks", "blocks_age": "blocks", "sqlite_autoindex_kv_1": "kv"}
    parts: dict[str, int] = {"free pages": free}
    for name, size in pages.items():
        part = owner.get(name, name if name in ("records", "blocks", "kv") else "other")
        parts[part] = parts.get(part, 0) + size
    return parts


def previous_format(rows: list[SpoolRecord], kv: list[tuple], path: Path) -> int:
    """The same records and state laid out as the spool did before blocks: a row per record (as
    unpublished ones still are), a transaction per tick, the state uncompressed; its size on disk."""
    with Spool(path) as s:
        for _, tick in itertools.groupby(rows, key=lambda r: r.ts):
            s.append_many((r.topic, r.key, r.ts, r.value) for r in tick)
    with closing(sqlite3.connect(path)) as db, db:
        db.executemany("INSERT INTO kv(ns, key, value) VALUES (?,?,?)", kv)
    return on_disk(path)


class Scrapes:
    """The agents' ``/metrics`` (OpenMetrics, as Prometheus asks for it) at each snapshot of their
    node, stamped with the snapshot's time and grouped by family, as a backfill file wants them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.agents: dict[str, AgentMetrics] = {}
        self.headers: dict[str, list[str]] = {}
        self.files: dict[str, TextIO] = {}
        self.samples = 0

    def feed(self, rec: Any) -> None:
        agent = self.agents.setdefault(rec.node, AgentMetrics())
        agent.observe([rec])
        if isinstance(rec, NodeSnapshot):
            self.scrape(agent, rec.ts)

    def scrape(self, agent: AgentMetrics, ts: float) -> None:
        body, _ = exposition(agent.registry, COUNTERS, accept=OPENMETRICS)
        family = ""
        stamp = f" {ts:.3f}\n"
        for line in body.decode().splitlines():
            if line.startswith("# "):
                if line == "# EOF":
                    continue
                family = line.split(" ", 3)[2]
                header = self.headers.setdefault(family, [])
                if line not in header:
                    header.append(line)
                continue
            if family not in self.files:
                self.files[family] = open(self.tmp / f"family-{len(self.files)}.om", "w")  # noqa: SIM115
            self.files[family].write(line + stamp)
            self.samples += 1

    def write(self, out: Path) -> None:
        with open(out, "w") as f:
            for family, fh in self.files.items():
                fh.close()
                f.write("\n".join(self.headers[family]) + "\n")
                with open(fh.name) as part:
                    shutil.copyfileobj(part, f)
            f.write("# EOF\n")


def promtool() -> str:
    """Debian's promtool (scripts/prometheus-local installs the package when it is missing)."""
    if shutil.which("promtool") is None:
        subprocess.run([str(REPO / "scripts" / "prometheus-local"), "install"], check=True)
    return shutil.which("promtool") or "promtool"


def storage(tmp: Path) -> None:
    """``gpuwarden demo --simulate``'s spool on disk, beside the same records in the previous
    (rows only) format and a Prometheus TSDB backfilled with the agents' series of the same run."""
    load0 = os.getloadavg()
    demo = tmp / "demo"
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "gpuwarden.app.cli", "demo", "--simulate", "--json", "--dir",
                          str(demo)], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode:
        sys.exit(f"gpuwarden demo failed:\n{run.stderr[-2000:]}")
    demo_s = time.perf_counter() - t0
    db = demo / "spool.db"
    spool_bytes, parts = on_disk(db), spool_parts(db)
    with Spool(db) as s:
        rows = list(s.read())
        topics = s.topics()
    with closing(sqlite3.connect(db)) as c, Spool(db) as s:
        kv = [(ns, k, v) for (ns,) in c.execute("SELECT DISTINCT ns FROM kv") for k, v in s.kv_items(ns)]
    before = previous_format(rows, kv, tmp / "previous.db")

    samples_topic = Topics().samples
    scrapes = Scrapes(tmp)
    gpu_samples, gpus, ticks = 0, set(), set()
    for row in rows:
        if row.topic in (samples_topic, Topics().events, Topics().inference):
            rec = decode(row.value)
            if isinstance(rec, NodeSnapshot):
                gpu_samples += len(rec.gpus.index)
                gpus.update((rec.node, i) for i in rec.gpus.index)
                ticks.add(rec.interval_s)
            scrapes.feed(rec)
    om = tmp / "backfill.om"
    scrapes.write(om)
    tsdb = tmp / "tsdb"
    t0 = time.perf_counter()
    subprocess.run([promtool(), "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)],
                   check=True, stdout=subprocess.DEVNULL)
    backfill_s = time.perf_counter() - t0
    prom = on_disk(tsdb)
    load1 = os.getloadavg()

    tick = ticks.pop() if len(ticks) == 1 else 5.0
    per_day = 86400 / tick
    print(f"\nthe demo's spool: gpuwarden demo --simulate ({demo_s:.0f} s wall), {len(rows)} records "
          f"({', '.join(f'{t} {n}' for t, n in sorted(topics.items()))}); {gpu_samples} GPU-samples of "
          f"{len(gpus)} GPUs every {tick:g} s; load {load0[0]:.1f} before, {load1[0]:.1f} after")
    print(f"{'store':44} {'bytes':>12} {'B/GPU-sample':>13} {'MB/GPU-day':>11} {'vs Prometheus':>14}")
    for name, size in (("gpuwarden spool (blocks), whole file", spool_bytes),
                       *((f"  of which {k}", v) for k, v in sorted(parts.items(), key=lambda kv: -kv[1])),
                       ("rows only (the previous layout), same records", before),
                       (f"Prometheus TSDB, {scrapes.samples / gpu_samples:.1f} samples/GPU-sample", prom)):
        b = size / gpu_samples
        print(f"{name:44} {size:12,} {b:13.1f} {b * per_day / 1e6:11.2f} {size / prom:13.2f}x")
    print(f"{'topic':20} {'records':>8} {'JSON bytes':>12} {'in blocks':>10} {'block bytes':>12} {'B/record':>9}")
    with closing(sqlite3.connect(db)) as c:
        sealed = {t: (n, b) for t, n, b in c.execute("SELECT topic, SUM(n), SUM(length(data)) FROM blocks GROUP BY topic")}
    for topic, n in sorted(topics.items()):
        raw = sum(len(r.value) for r in rows if r.topic == topic)
        k, b = sealed.get(topic, (0, 0))
        print(f"{topic:20} {n:8} {raw:12,} {k:10} {b:12,} {b / k if k else 0:9.1f}")
    jobs_topic = Topics().jobs
    stored = [decode(r.value) for r in rows if r.topic == jobs_topic]
    whole = sum(1 for _ in expand(stored))
    hours = (max(r.ts for r in rows) - min(r.ts for r in rows)) / 3600
    print(f"scheduler.jobs: {len(stored):,} records stored ({len(stored) / hours:,.0f} per hour of event time), "
          f"read back as {whole:,} in whole polls ({whole / hours:,.0f} per hour)")
    print(f"(Prometheus: the agents' /metrics in OpenMetrics at each snapshot, {scrapes.samples:,} samples "
          f"backfilled by promtool tsdb create-blocks-from openmetrics into 2 h blocks in {backfill_s:.0f} s; "
          "no task metrics or scheduler records, which the agents do not export)")


if __name__ == "__main__":
    main()
