"""Live cost: CPU per GPU-sample of one ``gpuwarden streams`` worker beside a Prometheus doing the same job.

Usage: .venv/bin/python bench/live_cost.py [--points 500x1,500x5,2000x1,2000x5] [--seconds 90]
                                           [--warmup 30] [--evaluation 15s]
Needs: a broker ($KAFKA_BOOTSTRAP, else ``scripts/kafka-local`` starts one) and Debian's
``prometheus`` (``scripts/prometheus-local`` installs it).

The same simulated GPUs feed both sides: ``--ticks`` consecutive ticks of the seeded
simulator's ``healthy`` fleet, cycled, so values change from sample to sample on both sides.

* **Prometheus side**: an exporter stand-in serves those ticks in dcgm-exporter's names and
  labels (19 series per GPU, pre-rendered: the cheapest exporter there can be, so its figure is a
  floor for any real one), Prometheus scrapes it every interval and evaluates rules equivalent
  to gpuwarden's (``bench/live_cost_rules.yml``: memory growth with ``deriv``/``for``,
  utilization against ``avg_over_time``, thermal, temperature rising at constant power, clocks
  below their hour's max, idle-but-allocated, XID changes, ECC increases, row-remap failure)
  every ``--evaluation``.
* **gpuwarden side**: a producer in this process publishes the same ticks (one NodeSnapshot per
  node per interval, re-stamped with ``ts`` and ``seq``) into ``gpu.samples``; one worker
  consumes them (every task of every group: node and class stages, exactly once).
* **Agent vs exporter**: one ``gpuwarden agent --simulate healthy`` for one node of 8 GPUs at
  each interval, publishing to Kafka (its source is the simulator, not NVML: the NVML calls'
  own cost is bench/agent_overhead.py's), beside the stand-in exporter's cost per GPU-sample.

* **State and restore**: the bytes the worker adds to its changelogs and batch logs while it
  runs (the broker's log segments, project broker only), the bytes of the snapshot its clean stop
  writes, and then a fresh worker's restore of every task from them (seconds per task as it logs).

Each side runs alone (the machine has two cores): ``--warmup`` seconds, then ``--seconds``
measured. CPU is each process's scheduler time (all threads, /proc/<pid>/task/*/schedstat); the
Kafka broker's is reported on its own line, as Prometheus's storage is inside Prometheus. Both
sides start empty: Prometheus's range windows and the worker's baselines hold minutes, not hours.
The last line is JSON (for bench/run_all.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from aiokafka import AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the harness lives under tests/

from gpuwarden.contract import NodeSnapshot, Topics, encode  # noqa: E402
from gpuwarden.producers.publisher import COMPRESSION  # noqa: E402
from gpuwarden.producers.simulator import Simulator  # noqa: E402
from gpuwarden.streams.groups import groups  # noqa: E402
from gpuwarden.streams.statewire import app_id  # noqa: E402
from tests.kafka_support import create_topic  # noqa: E402
from tests.streams_kafka.records import settings_for  # noqa: E402
from tests.streams_kafka.workers import Worker, cpu_s, group_members, wait_for, write_config  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RULES = Path(__file__).resolve().parent / "live_cost_rules.yml"
PARTITIONS = 4
TS0, SEQ0 = 1_700_000_000.0, 0
MIB = 1 << 20

# dcgm-exporter's names (etc/default-counters.csv and the DCP fields) for the GpuSample fields
# the rules read; a value of None is left out, as dcgm-exporter leaves out a blank field.
DCGM = (
    ("DCGM_FI_DEV_GPU_UTIL", lambda g: g.util_gpu),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", lambda g: g.util_memory),
    ("DCGM_FI_DEV_FB_USED", lambda g: g.mem_used_bytes and g.mem_used_bytes // MIB),
    ("DCGM_FI_DEV_FB_FREE", lambda g: g.mem_total_bytes and (g.mem_total_bytes - (g.mem_used_bytes or 0)) // MIB),
    ("DCGM_FI_DEV_GPU_TEMP", lambda g: g.temp_gpu_c),
    ("DCGM_FI_DEV_MEMORY_TEMP", lambda g: g.temp_memory_c),
    ("DCGM_FI_DEV_POWER_USAGE", lambda g: g.power_w),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", lambda g: g.energy_mj),
    ("DCGM_FI_DEV_SM_CLOCK", lambda g: g.clock_sm_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", lambda g: g.clock_mem_mhz),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", lambda g: g.clock_event_reasons),
    ("DCGM_FI_DEV_XID_ERRORS", lambda g: 0),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", lambda g: g.ecc_volatile_corrected or 0),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lambda g: g.ecc_volatile_uncorrected or 0),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", lambda g: g.pcie_replay_counter or 0),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", lambda g: int(bool(g.remap_failure))),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", lambda g: g.sm_active is not None and g.sm_active / 100),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", lambda g: g.tensor_active is not None and g.tensor_active / 100),
    ("DCGM_FI_PROF_DRAM_ACTIVE", lambda g: g.dram_active is not None and g.dram_active / 100),
)


@dataclass(frozen=True)
class Fleet:
    """``ticks`` of one simulated fleet: per tick the nodes' (key, wire value with ts/seq tokens)."""

    gpus: int
    snapshots: list[list[tuple[bytes, bytes]]]
    exposition: list[bytes]


def fleet(gpus: int, ticks: int) -> Fleet:
    sim = Simulator("healthy", nodes=max(1, gpus // 8), gpus=8, start_ts=TS0, tick_s=1.0, seed=3)
    snapshots, exposition = [], []
    for _ in range(ticks):
        nodes = [r for r in sim.step() if isinstance(r, NodeSnapshot)]
        snapshots.append([(n.node.encode(), encode(n.model_copy(update={"ts": TS0, "seq": SEQ0}))) for n in nodes])
        exposition.append(render(nodes))
    return Fleet(gpus=len(snapshots[0]) * 8, snapshots=snapshots, exposition=exposition)


def render(nodes: list[NodeSnapshot]) -> bytes:
    """One scrape of dcgm-exporter for these nodes (its label set: gpu, UUID, device, modelName, Hostname)."""
    lines = []
    for name, value in DCGM:
        lines.append(f"# TYPE {name} gauge")
        for n in nodes:
            for g in n.gpus.rows():
                v = value(g)
                if v is None or v is False:
                    continue
                lines.append(f'{name}{{gpu="{g.index}",UUID="{g.uuid}",device="nvidia{g.index}",'
                             f'modelName="{g.name or "NVIDIA H200"}",Hostname="{n.node}"}} {float(v):g}')
    return ("\n".join(lines) + "\n").encode()


def stamp(value: bytes, ts: float, seq: int) -> bytes:
    return value.replace(b'"ts":1700000000.0', b'"ts":%.1f' % ts, 1).replace(b'"seq":0,', b'"seq":%d,' % seq, 1)


class Exporter:
    """The stand-in: each scrape gets the next pre-rendered tick."""

    def __init__(self, bodies: list[bytes]) -> None:
        served = iter(range(1 << 62))

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = bodies[next(served) % len(bodies)]
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        # not ThreadingHTTPServer: one thread serves every scrape, so its CPU is the exporter's
        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.target = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Exporter:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()


def thread_cpu_s(thread: threading.Thread) -> float:
    """CPU seconds of one thread of this process (its native id's schedstat)."""
    return int(Path(f"/proc/self/task/{thread.native_id}/schedstat").read_text().split()[0]) / 1e9


def broker_pid() -> int | None:
    state = ROOT / ".cache" / "kafka" / "run" / "state.json"
    return json.loads(state.read_text())["pid"] if state.exists() else None


def bootstrap() -> str:
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return os.environ["KAFKA_BOOTSTRAP"]
    p = subprocess.run([sys.executable, "scripts/kafka-local", "start"], capture_output=True, text=True, timeout=300,
                       cwd=ROOT)
    return p.stdout.strip().splitlines()[-1]


@dataclass(frozen=True)
class Side:
    cpu_s: float
    gpu_samples: int

    @property
    def us_per_sample(self) -> float:
        return self.cpu_s / max(1, self.gpu_samples) * 1e6


async def prometheus_side(f: Fleet, interval: float, evaluation: str, warmup: float, seconds: float) -> dict:
    with Exporter(f.exposition) as exporter:
        started = subprocess.run(
            [sys.executable, "scripts/prometheus-local", "start", "--target", exporter.target,
             "--interval", f"{interval:g}s", "--evaluation-interval", evaluation, "--rules", str(RULES)],
            capture_output=True, text=True, cwd=ROOT, timeout=600)
        if started.returncode != 0:
            raise SystemExit(f"prometheus-local start failed:\n{started.stdout}{started.stderr}")
        url = started.stdout.strip().splitlines()[-1]
        pid = int((ROOT / ".cache" / "prometheus" / "pid").read_text())
        try:
            await asyncio.sleep(warmup)
            p0, e0, t0 = cpu_s(pid), thread_cpu_s(exporter.thread), time.monotonic()
            await asyncio.sleep(seconds)
            p1, e1, t1 = cpu_s(pid), thread_cpu_s(exporter.thread), time.monotonic()
            scraped = up(url)
        finally:
            subprocess.run([sys.executable, "scripts/prometheus-local", "stop"], capture_output=True, cwd=ROOT)
    samples = int(f.gpus * (t1 - t0) / interval)
    return {"prometheus": Side(p1 - p0, samples), "exporter": Side(e1 - e0, samples), "up": scraped}


def up(url: str) -> bool:
    import httpx

    r = httpx.get(f"{url}/api/v1/query", params={"query": "up"}).json()
    return all(x["value"][1] == "1" for x in r["data"]["result"]) and bool(r["data"]["result"])


async def gpuwarden_side(bs: str, f: Fleet, interval: float, warmup: float, seconds: float, tmp: Path) -> dict:
    settings = settings_for(bs, partitions=PARTITIONS)
    topics, prefix = Topics(settings.kafka.topic_prefix), settings.kafka.topic_prefix
    for t in (topics.samples, topics.events, topics.metrics):
        await create_topic(bs, t, partitions=PARTITIONS)
    config = write_config(tmp / f"gw-{f.gpus}-{interval:g}.yaml", settings)
    producer = AIOKafkaProducer(bootstrap_servers=bs, linger_ms=20, compression_type=COMPRESSION, acks=1,
                                max_request_size=16 << 20)
    await producer.start()
    worker = Worker(config, f"live-{f.gpus}-{interval:g}", tmp, verbose=False)
    broker = broker_pid()
    try:
        async def joined() -> bool:
            return await group_members(bs, app_id(settings)) == 1

        await wait_for(joined, "the worker in the group", bound=120)
        began, tick, mark = time.monotonic(), 0, None
        while True:
            now = time.monotonic()
            if mark is None and now - began >= warmup:
                mark = (cpu_s(worker.proc.pid), cpu_s(broker) if broker else 0.0, now, tick, state_bytes(prefix))
            if now - began >= warmup + seconds:
                break
            ts = time.time()
            for key, value in f.snapshots[tick % len(f.snapshots)]:
                await producer.send(topics.samples, stamp(value, ts, tick), key=key)  # queued; flushed below
            tick += 1
            await asyncio.sleep(max(0.0, began + tick * interval - time.monotonic()))
        w1, b1, t1, s1 = cpu_s(worker.proc.pid), cpu_s(broker) if broker else 0.0, time.monotonic(), state_bytes(prefix)
        alive = worker.alive()
        await producer.flush()
    finally:
        await producer.stop()
        worker.stop()
    w0, b0, t0, tick0, s0 = mark
    samples = (tick - tick0) * f.gpus
    snapshot = less(state_bytes(prefix), s1)  # the clean stop's snapshot of every task (state changed since the last)
    restore = await restore_seconds(config, len(groups(topics)) * PARTITIONS, tmp,
                                    f"live-{f.gpus}-{interval:g}-again")
    return {"worker": Side(w1 - w0, samples), "broker": Side(b1 - b0, samples), "alive": alive,
            "kept_rate": (tick - tick0) >= 0.95 * (t1 - t0) / interval,
            "state_bytes_per_s": None if (d := less(s1, s0)) is None else d / (t1 - t0),
            "snapshot_bytes": snapshot, "restore": restore}


def less(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a - b


def state_bytes(prefix: str) -> int | None:
    """Bytes in the broker's log segments of the workers' changelogs and batch logs (the
    project's own broker: its data dir is read; None for another broker)."""
    data = ROOT / ".cache" / "kafka" / "run" / "data"
    if broker_pid() is None or not data.is_dir():
        return None
    return sum(seg.stat().st_size for d in data.glob(f"{prefix}gpuwarden-streams-*") if d.name.rsplit("-", 2)[-2]
               in ("changelog", "batchlog") for seg in d.glob("*.log"))


async def restore_seconds(config: Path, tasks: int, tmp: Path, worker_id: str) -> dict:
    """A fresh worker restores every task from what the stopped one left: each task's restore
    seconds as it logs them ("task … restored … in X s")."""
    worker = Worker(config, worker_id, tmp, verbose=True)
    pattern = re.compile(r"task (\S+): (\d+) keys restored, \d+ batches \((\d+) records\) replayed in ([\d.]+) s")
    try:
        async def restored() -> bool:
            return len(pattern.findall(worker.log.read_text(errors="replace"))) >= tasks
        await wait_for(restored, "every task restored", bound=300)
        found = pattern.findall(worker.log.read_text(errors="replace"))
    finally:
        worker.stop()
    node = [float(s) for tid, _k, _r, s in found if tid.startswith("node")]
    return {"tasks": len(found), "max_s": max(float(s) for *_, s in found), "node_max_s": max(node, default=0.0),
            "keys": sum(int(k) for _t, k, _r, _s in found), "replayed": sum(int(r) for _t, _k, r, _s in found)}


def agent_side(bs: str, interval: float, warmup: float, seconds: float, tmp: Path) -> Side:
    settings = settings_for(bs, partitions=PARTITIONS)
    config = tmp / f"agent-{interval:g}.yaml"
    config.write_text(json.dumps({"kafka": {"bootstrap": bs, "topic_prefix": settings.kafka.topic_prefix,
                                            "partitions": PARTITIONS},
                                  "agent": {"fast_interval": interval}}))
    with (tmp / f"agent-{interval:g}.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "gpuwarden.app.cli", "agent", "--config", str(config),
                                 "--simulate", "healthy", "--nodes", "1", "--gpus", "8", "--node", "live-agent"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            time.sleep(warmup)
            c0, t0 = cpu_s(proc.pid), time.monotonic()
            time.sleep(seconds)
            c1, t1 = cpu_s(proc.pid), time.monotonic()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return Side(c1 - c0, int(8 * (t1 - t0) / interval))


def points(text: str) -> list[tuple[int, float]]:
    out = []
    for p in text.split(","):
        gpus, _, interval = p.partition("x")
        out.append((int(gpus), float(interval)))
    return out


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--points", default="500x1,500x5,2000x1,2000x5", help="GPUSxSECONDS, comma-separated")
    ap.add_argument("--seconds", type=float, default=90.0, help="measured seconds per side and point")
    ap.add_argument("--warmup", type=float, default=30.0)
    ap.add_argument("--evaluation", default="15s", help="Prometheus's rule evaluation interval")
    ap.add_argument("--ticks", type=int, default=30, help="distinct simulator ticks, cycled")
    args = ap.parse_args()
    bs = bootstrap()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for gpus, interval in points(args.points):
            f = fleet(gpus, args.ticks)
            prom = await prometheus_side(f, interval, args.evaluation, args.warmup, args.seconds)
            gw = await gpuwarden_side(bs, f, interval, args.warmup, args.seconds, Path(d))
            ratio = gw["worker"].us_per_sample / max(1e-9, prom["prometheus"].us_per_sample)
            rows.append({"gpus": f.gpus, "interval_s": interval,
                         "worker_us": gw["worker"].us_per_sample, "prometheus_us": prom["prometheus"].us_per_sample,
                         "broker_us": gw["broker"].us_per_sample, "exporter_us": prom["exporter"].us_per_sample,
                         "ratio": ratio, "worker_alive": gw["alive"], "kept_rate": gw["kept_rate"],
                         "scrapes_up": prom["up"], "state_bytes_per_s": gw["state_bytes_per_s"],
                         "snapshot_bytes": gw["snapshot_bytes"], "restore": gw["restore"]})
            print(f"{f.gpus:5d} GPUs every {interval:g} s: worker {gw['worker'].us_per_sample:6.1f} µs/GPU-sample, "
                  f"Prometheus {prom['prometheus'].us_per_sample:6.1f} (worker/Prometheus {ratio:.2f}); "
                  f"Kafka broker {gw['broker'].us_per_sample:.1f}, exporter stand-in "
                  f"{prom['exporter'].us_per_sample:.1f}; worker alive {gw['alive']}, producer kept the rate "
                  f"{gw['kept_rate']}, scrapes up {prom['up']}", flush=True)
            rs, kib = gw["restore"], (lambda b: "?" if b is None else f"{b / 1024:,.1f} KiB")
            print(f"      state topics (changelogs, batch logs) {kib(gw['state_bytes_per_s'])}/s while running, "
                  f"the stop's snapshot {kib(gw['snapshot_bytes'])}; a fresh worker restored {rs['tasks']} tasks "
                  f"({rs['keys']} keys, {rs['replayed']} records replayed), slowest {rs['max_s']:.2f} s "
                  f"(node tasks {rs['node_max_s']:.2f} s)", flush=True)
        agents = {}
        for interval in sorted({i for _, i in points(args.points)}):
            a = agent_side(bs, interval, args.warmup, args.seconds, Path(d))
            agents[interval] = asdict(a) | {"us_per_sample": a.us_per_sample}
            print(f"agent, 8 simulated GPUs every {interval:g} s: {a.us_per_sample:.1f} µs/GPU-sample "
                  f"({a.cpu_s:.2f} CPU-s over {a.gpu_samples} GPU-samples)", flush=True)
    worst = max(r["ratio"] for r in rows)
    print(f"worker at or below Prometheus at every point: {worst <= 1.0} (worst ratio {worst:.2f})")
    print(json.dumps({"points": rows, "agent": agents, "worst_ratio": worst}))


if __name__ == "__main__":
    asyncio.run(main())
