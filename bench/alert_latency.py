"""Latency from a hardware event (GpuEvent XID 79) to the fake Feishu bot receiving the page.

Usage: .venv/bin/python bench/alert_latency.py [EVENTS]   (default 100, paced 0.65 s apart)

Standalone path (what ``gpuwarden run`` wires): the record goes into the Engine
(node stage: reorder buffer, XID catalogue → critical rule), the transition into
the Notifier (router: critical has no group_wait; delivery: render, sign,
rate-limit bookkeeping, delivery log in an on-disk spool) and over loopback HTTP
to a fake Feishu bot that checks the signature. One event per node, one at a
time, each node known to the engine first (a snapshot) so only the event path is
timed. Peer: a bare httpx POST of a fixed signed card to the same bot.

``allowed_lateness`` is 0 here: with the default 30 s the node stage holds every
record until the node's newest record is 30 s of event time past it. On a live
1 Hz agent a hardware event therefore pages up to bucket (15 s) + lateness (30 s)
of event time after it happened, plus the figure below.
The last line is JSON (for bench/run_all.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fakes live under tests/

from gpuwarden.app.settings import validate_settings  # noqa: E402
from gpuwarden.contract import GpuEvent, GpuSample, NodeSnapshot  # noqa: E402
from gpuwarden.spool import Spool  # noqa: E402
from gpuwarden.notifiers.pipeline import Notifier  # noqa: E402
from gpuwarden.streams.config import EngineConfig  # noqa: E402
from gpuwarden.streams.engine import Engine  # noqa: E402
from tests.fakes.http import FakeFeishu, feishu_sign  # noqa: E402

SECRET = "bench-feishu-secret"
PACE_S = 0.65


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100)[q - 1] if len(xs) > 1 else xs[0]


async def main(n: int) -> dict[str, float]:
    os.environ["BENCH_FS_URL"], os.environ["BENCH_FS_SECRET"] = "", SECRET
    with FakeFeishu(secret=SECRET) as fs, tempfile.TemporaryDirectory() as d, Spool(Path(d) / "s.db") as spool:
        os.environ["BENCH_FS_URL"] = fs.base + fs.hook
        settings = validate_settings({"notify": {
            "receivers": [{"name": "oncall", "feishu": {"url": {"env": "BENCH_FS_URL"},
                                                         "secret": {"env": "BENCH_FS_SECRET"}}}],
            "team": "oncall", "owners": {"default": "oncall"}, "escalation": [{"receivers": ["oncall"]}]}})
        engine = Engine(config=EngineConfig(allowed_lateness=0))
        notifier = Notifier(settings, spool=spool)
        now = float(int(time.time()) // 15 * 15)

        def snap(i: int, seq: int, ts: float) -> NodeSnapshot:
            return NodeSnapshot.of(node=f"node-{i:04d}", seq=seq, boot_id="b", agent_version="bench", ts=ts,
                                gpus=[GpuSample(index=0, uuid=f"GPU-{i}")])

        for i in range(n):
            engine.process(snap(i, 0, now))
        lat: list[float] = []
        for i in range(n):
            before = len(fs.accepted)
            ev = GpuEvent(node=f"node-{i:04d}", seq=1, boot_id="b", ts=now + 1, kind="xid", source="nvml",
                          code=79, gpu_index=0, gpu_uuid=f"GPU-{i}", message="GPU has fallen off the bus")
            t0 = time.time()
            for tr in engine.process(ev) + engine.process(snap(i, 2, now + 16)):
                await notifier.handle(tr)
            await notifier.tick()
            if len(fs.accepted) == before:
                raise SystemExit(f"event {i}: no page reached the bot (answers: {fs.requests[-1].answer[:2]})")
            lat.append(fs.accepted[before].at - t0)
            await asyncio.sleep(PACE_S)
        await notifier.aclose()
        peer: list[float] = []
        async with httpx.AsyncClient() as client:
            for _ in range(n):
                ts = str(int(time.time()))
                body = {"timestamp": ts, "sign": feishu_sign(ts, SECRET), "msg_type": "interactive",
                        "card": {"header": {"title": {"tag": "plain_text", "content": "XID 79"}}, "elements": []}}
                before = len(fs.requests)  # received, whatever the bot's rate limit answers
                t0 = time.time()
                await client.post(fs.base + fs.hook, json=body)
                peer.append(fs.requests[before].at - t0)
    out = {"events": n, "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
           "peer_p50_ms": pct(peer, 50) * 1e3, "peer_p99_ms": pct(peer, 99) * 1e3}
    out["ratio_p50"] = out["p50_ms"] / out["peer_p50_ms"]
    print(f"hardware event (XID 79) → engine → notifier → fake Feishu, {n} events")
    print(f"  gpuwarden   p50 {out['p50_ms']:7.2f} ms   p99 {out['p99_ms']:7.2f} ms")
    print(f"  bare POST   p50 {out['peer_p50_ms']:7.2f} ms   p99 {out['peer_p99_ms']:7.2f} ms")
    print(f"  ratio p50   {out['ratio_p50']:.2f}x  (plus allowed_lateness on a live agent, default 30 s)")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
