"""Raw NVML trace lines (the H200 leak probe's format) as contract records, for replay and tests.

The probe (``/work/shared/reference/h200-leak-probe.jsonl``, a copy in
``tests/fixtures/h200-leak-probe/``) sampled one GPU at 10 Hz with NVML straight from Python,
not through the agent: a first ``{"about": ...}`` line, then per sample ``t`` (s since start),
``util``, ``mem_util`` (%), ``mem_used_mib``, ``power_w``, ``temp_c``, ``sm_mhz``, ``reasons`` (the
clock-event bitmask) and ``procs`` (``[[pid, used MiB], ...]``). Each sample becomes one
``node_snapshot/2`` with that GPU and its processes; what the probe did not read (the power
limit, the maximum SM clock, memory total, the GPU's uuid) is left out unless given as an
option, and the options given are said in the README of the fixture made with them. The
reasons' names (``clock_event_names``) are left out: the engine reads the bitmask, and the
agent's decoder lives in another room.

``python -m gpuwarden.history.nvmltrace IN OUT --start 2026-11-30T01:00:00Z [--sm-max-mhz 1980]
[--power-limit-w 700] [--mem-total-mib 143771]`` writes one JSON record per line.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuwarden.contract import GpuProcess, GpuSample, NodeSnapshot, encode
from gpuwarden.units import parse_time

AGENT = "nvml-trace-import"
_MIB = 1 << 20


@dataclass(frozen=True)
class TraceFacts:
    """What the trace does not carry but the card is known to have (each ``None``: unknown)."""

    node: str
    uuid: str
    name: str | None = None
    sm_max_mhz: int | None = None
    power_limit_w: float | None = None
    mem_total_mib: int | None = None


class TraceError(ValueError):
    """A trace line that is not a sample: its line number and what is wrong."""


def snapshots(lines: Iterable[str], start_ts: float, facts: TraceFacts) -> Iterator[NodeSnapshot]:
    """One snapshot per sample line (the ``about`` line and blank lines are skipped)."""
    boot = f"trace-{int(start_ts)}"
    prev_t: float | None = None
    seq = 0
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            s = json.loads(line)
        except ValueError as e:
            raise TraceError(f"line {n}: not JSON ({e})") from None
        if "about" in s and "t" not in s:
            continue
        try:
            t, reasons = float(s["t"]), s.get("reasons")
            gpu = GpuSample(
                index=0, uuid=facts.uuid, name=facts.name, util_gpu=s.get("util"), util_memory=s.get("mem_util"),
                mem_used_bytes=None if s.get("mem_used_mib") is None else int(s["mem_used_mib"]) * _MIB,
                mem_total_bytes=None if facts.mem_total_mib is None else facts.mem_total_mib * _MIB,
                temp_gpu_c=s.get("temp_c"), power_w=s.get("power_w"), power_limit_w=facts.power_limit_w,
                clock_sm_mhz=s.get("sm_mhz"), clock_sm_max_mhz=facts.sm_max_mhz, clock_event_reasons=reasons)
            procs = [GpuProcess(pid=int(pid), gpu_index=0, gpu_uuid=facts.uuid, used_memory_bytes=int(mib) * _MIB)
                     for pid, mib in s.get("procs") or []]
        except (KeyError, TypeError, ValueError) as e:
            raise TraceError(f"line {n}: not a trace sample ({e})") from None
        yield NodeSnapshot.of(ts=round(start_ts + t, 3), node=facts.node, seq=seq, boot_id=boot, agent_version=AGENT,
                              interval_s=None if prev_t is None else round(t - prev_t, 3), gpus=[gpu],
                              processes=procs)
        prev_t, seq = t, seq + 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gpuwarden.history.nvmltrace", description=__doc__.split("\n")[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("output", type=Path)
    ap.add_argument("--start", required=True, help="event time of t=0 (ISO 8601 or epoch seconds)")
    ap.add_argument("--node", default="h200-probe")
    ap.add_argument("--uuid", default="GPU-trace-0", help="the probe did not record the GPU's uuid")
    ap.add_argument("--name")
    ap.add_argument("--sm-max-mhz", type=int)
    ap.add_argument("--power-limit-w", type=float)
    ap.add_argument("--mem-total-mib", type=int)
    a = ap.parse_args(argv)
    facts = TraceFacts(a.node, a.uuid, a.name, a.sm_max_mhz, a.power_limit_w, a.mem_total_mib)
    with a.trace.open() as f, a.output.open("wb") as out:
        start = parse_time(a.start, 0.0)
        assert start is not None
        for snap in snapshots(f, start, facts):
            out.write(encode(snap) + b"\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
