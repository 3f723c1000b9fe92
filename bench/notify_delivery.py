"""Delivery throughput and single-notification latency against a loopback fake, next to raw httpx.

Run: .venv/bin/python bench/notify_delivery.py [N]
Prints figures and the ratio Delivery / raw POST (what rendering, rate-limit
bookkeeping, idempotency and the delivery log cost per notification).
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
from notifiers.delivery import Delivery  # noqa: E402
from notifiers.receivers import Receiver  # noqa: E402
from tests.fakes.alerts import note  # noqa: E402
from tests.fakes.http import FakeWebhook  # noqa: E402


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


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 500))
