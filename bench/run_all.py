"""``make bench``: run every benchmark in bench/ and rewrite docs/benchmarks.md from their output.

Usage: .venv/bin/python bench/run_all.py [--only NAME ...] [--out FILE] [--timeout S]

Each benchmark prints its figures and its peer side by side; this script records
every one verbatim under its command, with the machine, plus the JSON summary
line where a script ends with one. Hand-written notes (real-hardware figures,
explanations) live in docs/benchmarks-notes.md, one ``## <name>`` section per
benchmark (``## general`` at the end), and are carried into every rewrite.
Benchmarks that need Kafka get ``$KAFKA_BOOTSTRAP`` or kafka-local's broker.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

#: name, title, arguments, needs Kafka
BENCHMARKS: list[tuple[str, str, list[str], bool]] = [
    ("agent_overhead", "Agent CPU per GPU-tick (vs nvidia-smi polling, in-process NVML)", [], False),
    ("tasksdk_cost", "Task SDK cost per call", [], False),
    ("engine_throughput", "Engine GPU-samples/s per core", [], False),
    ("snapshot_decode", "Node snapshot decode: node_snapshot/2 columns vs the row form", [], False),
    ("streams_throughput", "End-to-end faust throughput on Kafka vs a naive one-record-per-GPU agent", [], True),
    ("alert_latency", "Alert latency: a live XID 79 → the on-call receiver (vs $BENCH_BEFORE)", ["--faults", "6"], True),
    ("memory_footprint", "Memory per tracked GPU series and per task-class baseline (vs raw samples)", [], False),
    ("worker_memory", "Stream worker memory after a 2-hour catch-up (vs the engine alone)", [], True),
    ("rules_table", "Rules: detection delays and false alerts per scenario", [], False),
    ("router_throughput", "Router decisions per second", [], False),
    ("notify_delivery", "Notifier delivery vs raw httpx", ["500"], False),
    ("signal_exit", "A run's exit after a signal while a chat holds its deliveries (vs nothing held)", ["3"], False),
    ("notify_latency", "Kafka alert → fake Feishu latency", [], True),
    ("history_io", "History: replay sources, export/import vs the engine", [], False),
    ("console_pages", "Console pages over the demo's spool and a synthetic week of 64 GPUs (vs a static file)", [], False),
    ("scale_run", "Scale run: 10,000 simulated GPUs at 1 Hz, 5 min, real Kafka, two stream workers", [], True),
    ("scheduler_collector", "Scheduler collector per poll with 10,000 jobs queued (vs the squeue --json call), "
     "and the engine's scheduler stage per job record", [], False),
    ("inference_scrape", "Agent scrape of a vLLM endpoint with 10 models (vs the HTTP request alone)", [], False),
    ("inference_stage", "Inference stage per record (vs decoding it, and stage 1 per snapshot)", [], False),
]


def machine() -> str:
    mem = ""
    try:
        kib = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1))  # type: ignore[union-attr]
        mem = f", {kib / 2**20:.0f} GiB"
    except (OSError, AttributeError):
        pass
    return (f"{os.cpu_count()} cores{mem}, {platform.processor() or platform.machine()}, "
            f"{platform.python_implementation()} {platform.python_version()}, {platform.system()} {platform.release()}")


def kafka_env() -> dict[str, str]:
    if os.environ.get("KAFKA_BOOTSTRAP"):
        return {}
    p = subprocess.run([PY, str(ROOT / "scripts" / "kafka-local"), "start"], capture_output=True, text=True,
                       timeout=300)
    return {"KAFKA_BOOTSTRAP": p.stdout.strip().splitlines()[-1]} if p.returncode == 0 and p.stdout.strip() else {}


def notes(path: Path) -> dict[str, str]:
    """``## name`` sections of the notes file."""
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    for part in re.split(r"^## ", path.read_text(), flags=re.M)[1:]:
        name, _, body = part.partition("\n")
        out[name.strip()] = body.strip()
    return out


def run(name: str, args: list[str], env: dict[str, str], timeout: float) -> tuple[str, int, float, dict | None]:
    t0 = time.monotonic()
    try:
        p = subprocess.run([PY, f"bench/{name}.py", *args], capture_output=True, text=True, timeout=timeout,
                           cwd=ROOT, env={**os.environ, **env})
        text, rc = p.stdout + (f"\n[stderr]\n{p.stderr.strip()[-1500:]}" if p.returncode else ""), p.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = f"{e.stdout or ''}\n[timed out after {timeout:.0f} s]", 124
    summary = None
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    if lines and lines[-1].startswith("{"):
        try:
            summary = json.loads(lines[-1])
            text = "\n".join(lines[:-1])
        except ValueError:
            pass
    return text.strip(), rc, time.monotonic() - t0, summary


def render(results: list[tuple[str, str, list[str], str, int, float, dict | None]], kept: dict[str, str]) -> str:
    out = ["# Benchmarks", "",
           "Written by `make bench` (`bench/run_all.py`): every figure below was printed by the script named in "
           "its command, on the machine named here, with its peer measured in the same run and the ratio beside "
           "it. Hand-written notes come from `docs/benchmarks-notes.md`. Benchmarks are never timed assertions "
           "in tests.", "", f"Machine: {machine()}; run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", ""]
    for name, title, args, text, rc, secs, summary in results:
        out += [f"## {title}", "", f"Command: `.venv/bin/python bench/{name}.py{''.join(' ' + a for a in args)}`"
                f" ({secs:.0f} s{'' if rc == 0 else f', exit {rc}'})", "", "```", text or "(no output)", "```", ""]
        if summary:
            out += ["Summary: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                           for k, v in summary.items()), ""]
        if kept.get(name):
            out += [kept[name], ""]
    if kept.get("general"):
        out += ["## Notes", "", kept["general"], ""]
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run these benchmarks only")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    ap.add_argument("--notes", type=Path, default=ROOT / "docs" / "benchmarks-notes.md")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per benchmark")
    args = ap.parse_args()
    chosen = [b for b in BENCHMARKS if not args.only or b[0] in args.only]
    env = kafka_env() if any(b[3] for b in chosen) else {}
    results = []
    for name, title, bargs, _ in chosen:
        if not (ROOT / "bench" / f"{name}.py").exists():
            results.append((name, title, bargs, "(not in this build)", 1, 0.0, None))
            continue
        print(f"bench: {name} …", file=sys.stderr, flush=True)
        text, rc, secs, summary = run(name, bargs, env, args.timeout)
        print(text, flush=True)
        results.append((name, title, bargs, text, rc, secs, summary))
    args.out.write_text(render(results, notes(args.notes)))
    print(f"bench: wrote {args.out}", file=sys.stderr)
    return 0 if all(r[4] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
