"""How long a receiver stays dark after its platform comes back: the probe step's cap, before and now.

Run: .venv/bin/python bench/notify_recovery.py [SEEDS]

On a simulated clock (tests/fakes/clock.py: minutes in milliseconds), a Feishu fake answers 503 for
3, 5 and 15 minutes while 30 notifications arrive, one every 3 s; delivery probes it with its
jittered backoff. Printed per outage and backoff cap (300 s: before #31; 60 s: ``PROBE_S``): the
seconds from the platform's return to the digest's arrival (median and worst over SEEDS jitter
seeds), the requests made during the outage, and the messages that carried the 30.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpuwarden.spool import Spool  # noqa: E402
from gpuwarden.notifiers.delivery import PROBE_S, Delivery  # noqa: E402
from gpuwarden.notifiers.receivers import Receiver  # noqa: E402
from tests.fakes.alerts import note  # noqa: E402
from tests.fakes.clock import SimClock  # noqa: E402
from tests.fakes.http import FakeFeishu  # noqa: E402


async def one(outage_s: float, cap_s: float, seed: int, tmp: Path) -> tuple[float, int, int]:
    clock = SimClock()
    with FakeFeishu(clock) as fake, Spool(tmp / f"s-{outage_s}-{cap_s}-{seed}.db") as spool:
        os.environ["BENCH_FS"] = fake.base + fake.hook
        fake.down_until = clock() + outage_s
        d = Delivery([Receiver(name="fs", feishu={"url": {"env": "BENCH_FS"}})], spool=spool, clock=clock,
                     sleep=clock.sleep, rng=random.Random(seed).random, max_backoff_s=cap_s)
        try:
            for i in range(30):
                await d.deliver(note("fs", i))
                await clock.sleep(3)
            await d.wait_idle()
        finally:
            await d.aclose()
    during = sum(q.at < fake.down_until for q in fake.requests)
    return fake.accepted[-1].at - fake.down_until, during, len(fake.accepted)


async def main(seeds: int) -> None:
    logging.disable(logging.WARNING)  # one "still failing" line per probe otherwise
    print(f"outage  cap    dark after return (p50 / max over {seeds} seeds)  requests during outage  messages")
    with tempfile.TemporaryDirectory() as tmp:
        for outage_s in (180.0, 300.0, 900.0):
            for cap_s in (300.0, PROBE_S):
                runs = [await one(outage_s, cap_s, s, Path(tmp)) for s in range(seeds)]
                dark = [r[0] for r in runs]
                print(f"{outage_s:5.0f}s  {cap_s:4.0f}s  {statistics.median(dark):7.1f} s / {max(dark):6.1f} s"
                      f"{statistics.median(r[1] for r in runs):30.0f}{max(r[2] for r in runs):16d}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10))
