"""How long each page of ``gpuwarden web`` takes over a spool (#33: ≤ 300 ms, median of 5).

Two spools, each served by a real ``gpuwarden web`` (a subprocess, over HTTP):

1. the demo's: ``gpuwarden demo --simulate`` (6 h of event time unless ``--demo-span``);
2. a synthetic week of 64 GPUs: ``--days`` (7) of history written straight into the spool (each of
   ``--nodes`` × ``--gpus`` nodes' snapshots every ``--tick`` s, the scheduler's job records and the
   alert history, copied from the demo's real records with their times shifted: a few hardware
   alerts a day stay open), then the last ``--tail`` (2 h) a real ``gpuwarden run --simulate mixed``
   of the same nodes into the same spool, which leaves its engine state and open alerts.

3. beside a writer: a console started on an empty spool while ``gpuwarden run --simulate mixed --nodes 2
   --gpus 8 --duration 3h`` writes into it (as fast as it can: about a minute here), its pages asked
   for in turn until the run ends: each request reads what was appended since the one before, and
   the engine state whenever the run saved it.

Per spool page: the first request after the console started (it reads the spool's indexes, the engine
state and the first page of charts at start, so this one may wait for that), then the median of
``--repeat`` (5) more. The reference, in the same run and through the same server, after the pages: a
static file (``/static/console.css``), i.e. what HTTP, the server and the client cost without reading anything.

    .venv/bin/python bench/console_pages.py [--out DIR] [--demo-span 6h] [--days 7]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from gpuwarden.contract import AlertState, AlertTransition, SchedulerJob, Topics, decode, encode
from gpuwarden.spool import Spool
from gpuwarden.units import parse_duration

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
PAGES = ("/", "/alerts", "/alerts?page=2", "/classes", "/services", "/scheduler", "/silences", "/retro")
REFERENCE = "/static/console.css"
LIVE_PAGES = ("/", "/alerts", "/classes", "/scheduler", "/silences", REFERENCE)
#: Rules whose alerts the synthetic week leaves open (hardware faults stay until someone acts).
STICKY = {"gpu-lost", "ecc-double-bit", "row-remap"}
DAY = 86400.0


def _gpuwarden(*args: str) -> None:
    r = subprocess.run([str(GPUWARDEN), *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"gpuwarden {' '.join(args)}: exit {r.returncode}\n{r.stderr[-2000:]}")


def build_demo(out: Path, span: str) -> Path:
    _gpuwarden("demo", "--simulate", "--json", "--dir", str(out / "demo"), "--duration", span)
    return out / "demo" / "gpuwarden.yaml"


def _fresh(d: Path, spool_options: str = "") -> Path:
    """A config in ``d`` for an empty spool there (the last one removed); returns its path."""
    d.mkdir(parents=True, exist_ok=True)
    for f in d.glob("spool.db*"):
        f.unlink()
    config = d / "gpuwarden.yaml"
    config.write_text(f"spool: {{path: {d / 'spool.db'}{spool_options}}}\n")
    return config


def _shifted_snapshot(value: bytes, node_from: str, node_to: str, ts: float) -> bytes:
    """A stored snapshot with another node name and time (the encoding starts with ``{"ts":``)."""
    assert value.startswith(b'{"ts":'), value[:20]
    rest = value[value.index(b",") + 1:].replace(f'"node":"{node_from}"'.encode(), f'"node":"{node_to}"'.encode(), 1)
    return b'{"ts":' + repr(ts).encode() + b"," + rest


def _fp(fp: str, day: int) -> str:
    return hashlib.sha256(f"{fp}/{day}".encode()).hexdigest()[:len(fp)]


def build_week(out: Path, demo_spool: Path, *, days: int, nodes: int, gpus: int, tick: float, tail: str) -> Path:
    """The synthetic week's spool (see the module's words); returns its config."""
    config = _fresh(out / "week", f", max_bytes: 8GiB, max_age: {days + 1}d")
    d = config.parent
    topics = Topics()
    end = float(int(time.time()) // 60 * 60)
    tail_s = parse_duration(tail)
    start, hist_end = end - days * DAY + 3600.0, end - tail_s
    with Spool(demo_spool) as demo:
        samples: dict[str, list[bytes]] = {}
        for r in demo.read(topics.samples):
            samples.setdefault(r.key or "", []).append(r.value)
        transitions = [decode(r.value, AlertTransition) for r in demo.read(topics.alerts)]
        jobs, seen = [], set()
        for r in demo.read(topics.jobs):
            j = decode(r.value)
            if not isinstance(j, SchedulerJob):
                continue
            k = (j.job_id, j.restarts, j.state, j.start_time, j.end_time)
            if k not in seen:  # as a collector that writes on change would have
                seen.add(k)
                jobs.append(j)
    demo_start = min(t.ts for t in transitions)
    names = sorted(samples)
    written = {"snapshots": 0, "alerts": 0, "jobs": 0}
    with Spool(d / "spool.db", 8 << 30, (days + 1) * DAY) as spool:
        batch: list[tuple[str, str | None, float, bytes]] = []

        def flush() -> None:
            spool.append_many(batch, published=True)
            batch.clear()

        for day in range(days):  # per day: its alerts and jobs, then its snapshots, in time order
            shift = start + day * DAY - demo_start
            day_end = min(start + (day + 1) * DAY, hist_end)
            if start + day * DAY >= hist_end:
                break
            for t in transitions:
                if t.ts + shift >= day_end:
                    continue
                moved = t.model_copy(update={"fingerprint": _fp(t.fingerprint, day), "ts": t.ts + shift,
                                             "started_at": t.started_at + shift,
                                             "ended_at": None if t.ended_at is None else t.ended_at + shift})
                batch.append((topics.alerts, moved.fingerprint, moved.ts, encode(moved)))
                if moved.state == AlertState.FIRING and t.rule not in STICKY and moved.ts + 3600 < day_end:
                    ended = moved.model_copy(update={"state": AlertState.RESOLVED, "ts": moved.ts + 3600,
                                                     "ended_at": moved.ts + 3600})
                    batch.append((topics.alerts, ended.fingerprint, ended.ts, encode(ended)))
                written["alerts"] += 1
            for j in jobs:
                if j.ts + shift >= day_end:
                    continue
                moved = j.model_copy(update={
                    "job_id": f"{j.job_id}-d{day}", "ts": j.ts + shift,
                    **{f: getattr(j, f) + shift for f in ("submit_time", "start_time", "end_time")
                       if getattr(j, f) is not None}})
                batch.append((topics.jobs, moved.cluster, moved.ts, encode(moved)))
                written["jobs"] += 1
            flush()
            ts = start + day * DAY
            while ts < day_end:
                for n in range(nodes):
                    name = f"sim-node-{n:02d}"
                    tmpl = names[n % len(names)]
                    values = samples[tmpl]
                    value = values[int((ts - start) / tick) % len(values)]
                    batch.append((topics.samples, name, ts, _shifted_snapshot(value, tmpl, name, ts)))
                    written["snapshots"] += 1
                if len(batch) >= 256:  # a run appends a tick at a time: the spool compresses as it goes
                    flush()
                ts += tick
            flush()
    print(f"synthetic week: {json.dumps(written)} written before the run", file=sys.stderr)
    _gpuwarden("run", "--config", str(config), "--simulate", "mixed", "--nodes", str(nodes), "--gpus", str(gpus),
               "--duration", tail, "--start", repr(hist_end), "--json")
    return config


def _serve(config: Path) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([str(GPUWARDEN), "web", "--config", str(config), "--port", "0"],
                            stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"console at (http://\S+/)", line)
    if not m:
        proc.kill()
        sys.exit(f"gpuwarden web printed {line!r}")
    return proc, m.group(1).rstrip("/")


def time_pages(config: Path, repeat: int) -> list[dict[str, object]]:
    proc, url = _serve(config)
    rows = []
    try:
        with httpx.Client(base_url=url, timeout=600) as http:
            for path in (*PAGES, REFERENCE):  # the reference last: the console reads the spool at start
                times, size = [], 0
                for _ in range(repeat + 1):
                    t0 = time.perf_counter()
                    r = http.get(path)
                    times.append(time.perf_counter() - t0)
                    r.raise_for_status()
                    size = len(r.content)
                rows.append({"page": path, "first_ms": round(times[0] * 1000, 1),
                             "median_ms": round(statistics.median(times[1:]) * 1000, 1),
                             "max_ms": round(max(times[1:]) * 1000, 1), "bytes": size})
    finally:
        proc.terminate()
        proc.wait()
    return rows


def time_beside_a_run(out: Path) -> list[dict[str, object]]:
    """Pages while a simulated run writes into the console's spool (see the module's words)."""
    config = _fresh(out / "live")
    proc, url = _serve(config)
    times: dict[str, list[float]] = {p: [] for p in LIVE_PAGES}
    try:
        run = subprocess.Popen([str(GPUWARDEN), "run", "--config", str(config), "--simulate", "mixed", "--nodes", "2",
                                "--gpus", "8", "--duration", "3h", "--json"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with httpx.Client(base_url=url, timeout=600) as http:
            while run.poll() is None:
                for path in LIVE_PAGES:
                    t0 = time.perf_counter()
                    http.get(path).raise_for_status()
                    times[path].append(time.perf_counter() - t0)
        if run.returncode != 0:
            sys.exit(f"gpuwarden run beside the console: exit {run.returncode}")
    finally:
        proc.terminate()
        proc.wait()
    return [{"page": p, "requests": len(ts), "median_ms": round(statistics.median(ts) * 1000, 1),
             "p90_ms": round(sorted(ts)[int(0.9 * len(ts))] * 1000, 1), "max_ms": round(max(ts) * 1000, 1)}
            for p, ts in times.items() if ts]


def _spool_bytes(config: Path) -> int:
    return sum(f.stat().st_size for f in config.parent.glob("spool.db*"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="var/bench-console", help="where the spools are built (replaced)")
    ap.add_argument("--demo-span", default="6h", help="the demo's event time (default: the demo's own 6h)")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--tick", type=float, default=30.0, help="seconds between a node's snapshots in the history "
                    "(30: the simulator's tick for a 7-day span)")
    ap.add_argument("--tail", default="2h", help="the real simulated run at the end of the week")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--reuse", action="store_true", help="time the spools already in --out, build nothing")
    args = ap.parse_args()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    demo = out / "demo" / "gpuwarden.yaml" if args.reuse else build_demo(out, args.demo_span)
    t1 = time.monotonic()
    week = out / "week" / "gpuwarden.yaml" if args.reuse else build_week(
        out, demo.parent / "spool.db", days=args.days, nodes=args.nodes, gpus=args.gpus, tick=args.tick, tail=args.tail)
    t2 = time.monotonic()
    if not args.reuse:
        print(f"built: demo in {t1 - t0:.0f} s, week in {t2 - t1:.0f} s", file=sys.stderr)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": os.getloadavg(),
              "args": vars(args), "spools": {}}
    for name, config in (("demo", demo), ("week", week)):
        with Spool(config.parent / "spool.db") as spool:
            counts = spool.topics()
        rows = time_pages(config, args.repeat)
        report["spools"][name] = {"bytes": _spool_bytes(config), "records": counts, "pages": rows}
        print(f"\n{name}: {_spool_bytes(config) / 1e6:.1f} MB, {sum(counts.values())} records", file=sys.stderr)
        print(f"{'page':<18}{'first ms':>10}{'median ms':>11}{'max ms':>9}{'bytes':>9}", file=sys.stderr)
        for r in rows:
            print(f"{r['page']:<18}{r['first_ms']:>10}{r['median_ms']:>11}{r['max_ms']:>9}{r['bytes']:>9}",
                  file=sys.stderr)
    live = report["beside_a_run"] = time_beside_a_run(out)
    print("\nbeside a run writing into the spool", file=sys.stderr)
    print(f"{'page':<20}{'requests':>9}{'median ms':>11}{'p90 ms':>9}{'max ms':>9}", file=sys.stderr)
    for r in live:
        print(f"{r['page']:<20}{r['requests']:>9}{r['median_ms']:>11}{r['p90_ms']:>9}{r['max_ms']:>9}", file=sys.stderr)
    report["load_after"] = os.getloadavg()
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
