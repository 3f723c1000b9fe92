"""Delivery cost next to raw httpx, then the delivery model under load against the documented platforms.

Run: .venv/bin/python bench/notify_delivery.py [N] [--window S]

1. N notifications one at a time to a loopback webhook: the ratio Delivery /
   raw POST (rendering, rate-limit bookkeeping, idempotency, the delivery log).
2. For S seconds of wall time (default 60) every chat receiver (Slack, Feishu,
   DingTalk, WeCom: the loopback platforms of tests/acceptance, which refuse
   over their documented limits) is handed 10 notifications a second, and
   Slack starts with a 429 + Retry-After: 30, while a PagerDuty receiver gets
   one critical page a second. Printed side by side: messages delivered per
   minute per platform (the most in any 60 s as the platform counted them)
   against its limit, notifications carried, refusals; and the delay of a page
   from hand-over to arrival, alone and while chat is throttled.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx  # noqa: E402

from gpuwarden.spool import Spool  # noqa: E402
from gpuwarden.notifiers.delivery import Delivery  # noqa: E402
from gpuwarden.notifiers.receivers import Receiver  # noqa: E402
from gpuwarden.contract import Tier  # noqa: E402
from tests.acceptance.platforms import DingTalk, Feishu, PagerDuty, Slack, WeCom, most_in_window  # noqa: E402
from tests.fakes.alerts import note  # noqa: E402
from tests.fakes.http import FakeWebhook  # noqa: E402

CHAT_RATE = 10.0  # notifications per second handed to each chat receiver
PAGE_EVERY_S = 1.0


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


async def main(n: int) -> None:
    with FakeWebhook() as fake, tempfile.TemporaryDirectory() as tmp, Spool(Path(tmp) / "s.db") as spool:
        os.environ["BENCH_WH"] = fake.base + "/alerts"
        r = Receiver(name="wh", webhook={"url": {"env": "BENCH_WH"}})
        body = b'{"version":"4","groupKey":"g","truncatedAlerts":0,"status":"firing","receiver":"wh",' \
               b'"groupLabels":{},"commonLabels":{},"commonAnnotations":{},"externalURL":"","alerts":[]}'
        async with httpx.AsyncClient() as c:
            raw = []
            for _ in range(n):
                t = time.perf_counter()
                await c.post(fake.base + "/alerts", content=body)
                raw.append(time.perf_counter() - t)
        d = Delivery([r], spool=spool)
        lat = []
        try:
            for i in range(n):
                t = time.perf_counter()
                out = await d.deliver(note("wh", i))
                lat.append(time.perf_counter() - t)
                assert out.status == "delivered", out
        finally:
            await d.aclose()
    for name, xs in (("raw httpx POST", raw), ("Delivery.deliver", lat)):
        print(f"{name:18s} n={n} throughput={n / sum(xs):8.1f}/s  p50={pct(xs, .5) * 1e3:6.2f} ms  "
              f"p99={pct(xs, .99) * 1e3:6.2f} ms")
    print(f"ratio Delivery/raw: p50 {pct(lat, .5) / pct(raw, .5):.2f}x, throughput {sum(raw) / sum(lat):.2f}x")


async def pages(d: Delivery, pd: PagerDuty, seconds: float, first: int) -> list[float]:
    """One critical page a second for ``seconds``; delay hand-over → arrival at PagerDuty, each."""
    handed: dict[str, float] = {}
    i = first
    end = time.time() + seconds
    while time.time() < end:
        n = note("pd", i, tier=Tier.CRITICAL)
        handed[n.alerts[0].fingerprint] = time.time()
        d.submit(n)
        i += 1
        await asyncio.sleep(PAGE_EVERY_S)
    while len({h.json["dedup_key"] for h in pd.accepted} & set(handed)) < len(handed) and time.time() < end + 10:
        await asyncio.sleep(0.01)
    arrived = {h.json["dedup_key"]: h.at for h in pd.accepted}
    return [arrived[fp] - t for fp, t in handed.items() if fp in arrived]


async def flood(d: Delivery, names: list[str], seconds: float) -> None:
    i, end = 100_000, time.time() + seconds
    while time.time() < end:
        for name in names:
            d.submit(note(name, i))
            i += 1
        await asyncio.sleep(1 / CHAT_RATE)


async def model(window_s: float) -> None:
    with Slack() as sl, Feishu("bench-fs-secret") as fs, DingTalk("SECbench-dt-secret") as dt, WeCom() as wc, \
            PagerDuty() as pd, tempfile.TemporaryDirectory() as tmp, Spool(Path(tmp) / "s.db") as spool:
        os.environ.update({"B_SL": sl.url, "B_FS": fs.url, "B_FS_S": "bench-fs-secret", "B_DT": dt.url,
                           "B_DT_S": "SECbench-dt-secret", "B_WC": wc.url, "B_PD": pd.routing_key})
        receivers = [Receiver(name="slack", slack={"url": {"env": "B_SL"}}),
                     Receiver(name="feishu", feishu={"url": {"env": "B_FS"}, "secret": {"env": "B_FS_S"}}),
                     Receiver(name="dingtalk", dingtalk={"url": {"env": "B_DT"}, "secret": {"env": "B_DT_S"}}),
                     Receiver(name="wecom", wecom={"url": {"env": "B_WC"}}),
                     Receiver(name="pd", pagerduty={"routing_key": {"env": "B_PD"}, "url": pd.url})]
        d = Delivery(receivers, spool=spool)
        try:
            alone = await pages(d, pd, 10, 0)
            sl.script.append((429, {"Content-Type": "text/html", "Retry-After": "30"}, b"rate_limited"))
            t0 = time.time()
            chats = ["slack", "feishu", "dingtalk", "wecom"]
            _, busy = await asyncio.gather(flood(d, chats, window_s), pages(d, pd, window_s, 1000))
            queued = {name: d.pending(name) for name in chats}
            carried: dict[str, int] = {}
            for e in d.log.read(1_000_000):
                if e["status"] == "delivered" and e["at"] >= t0:
                    carried[e["receiver"]] = carried.get(e["receiver"], 0) + 1
        finally:
            await d.aclose()
    handed = int(window_s * CHAT_RATE)
    print(f"\ndelivery model: {window_s:.0f} s of wall time, ~{handed} notifications handed to each chat "
          f"receiver ({CHAT_RATE:.0f}/s), Slack opening with 429 + Retry-After: 30, one page a second")
    print(f"{'platform':<10} {'documented limit':<18} {'msgs/min (max 60 s)':>20} {'notifications carried':>22} "
          f"{'refused':>8} {'queued at end':>14}")
    limits = {"slack": "1/s", "feishu": "5/s and 100/min", "dingtalk": "20/min", "wecom": "20/min"}
    for name, p in (("slack", sl), ("feishu", fs), ("dingtalk", dt), ("wecom", wc)):
        times = [h.at for h in p.hits if h.at >= t0]
        refused = sum(1 for h in p.hits if h.at >= t0 and not h.ok)
        print(f"{name:<10} {limits[name]:<18} {most_in_window(times, 60.0):>20d} {carried.get(name, 0):>22d} "
              f"{refused:>8d} {queued[name]:>14d}")
    extra = pct(busy, .5) - pct(alone, .5)
    print(f"page delay alone:              n={len(alone):3d}  p50={pct(alone, .5) * 1e3:7.1f} ms  "
          f"max={max(alone) * 1e3:7.1f} ms")
    print(f"page delay, chat throttled:    n={len(busy):3d}  p50={pct(busy, .5) * 1e3:7.1f} ms  "
          f"max={max(busy) * 1e3:7.1f} ms")
    print(f"extra delay of a page while chat is throttled: p50 {extra * 1e3:+.1f} ms, "
          f"max {(max(busy) - pct(alone, .5)) * 1e3:+.1f} ms (target < 1 s)")


if __name__ == "__main__":
    args = sys.argv[1:]
    window = 60.0
    if "--window" in args:
        k = args.index("--window")
        window = float(args[k + 1])
        del args[k:k + 2]
    asyncio.run(main(int(args[0]) if args else 500))
    asyncio.run(model(window))
