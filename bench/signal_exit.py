"""How long ``gpuwarden run`` takes to exit after a signal while a chat holds its deliveries, against
the same run with nothing held (the peer, measured in the same run; the ratio is the claim).

Run: .venv/bin/python bench/signal_exit.py [REPS]

Each repetition starts ``gpuwarden run --simulate xid-79 --gpus 8 --onset 0`` (live, real wall time)
against the loopback platforms of tests/acceptance (Slack, Feishu, DingTalk, WeCom, PagerDuty), waits
for the first page and Slack's first hit, then 5 s after the start sends SIGTERM (then SIGINT) and
times the exit. Held: Slack answers 429 with Retry-After: 3600 to everything. Peer: Slack answers
200. The seconds used to be a 5 s limit in tests/acceptance/test_run_delivery.py, which failed at
6.1 s on a busy box (#33); the tests now only bound a hang (120 s) against an hour of Retry-After.
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.acceptance.test_run_delivery import HOLD, Fleet, stop_and_time, wait_for  # noqa: E402

AFTER_S = 5.0


def once(held: bool, sig: int) -> float:
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        fleet = Fleet(stack, Path(tmp))
        if held:
            fleet.slack.script.extend([HOLD] * 100)
        p = fleet.start("--simulate", "xid-79", "--gpus", "8", "--onset", "0")
        started = time.monotonic()
        try:
            if not wait_for(lambda: len(fleet.pd.accepted) >= 1 and fleet.slack.hits, 120.0):
                raise SystemExit(f"no page within 120 s: {fleet.log()}")
            time.sleep(max(0.0, AFTER_S - (time.monotonic() - started)))
            if p.poll() is not None:
                raise SystemExit(f"the run ended by itself: {fleet.log()}")
        finally:
            took = stop_and_time(p, sig)
        return took


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {reps} runs per cell")
    rows = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        held = [once(True, sig) for _ in range(reps)]
        free = [once(False, sig) for _ in range(reps)]
        h, f = statistics.median(held), statistics.median(free)
        rows.append((sig, h, f))
        print(f"{signal.Signals(sig).name:8} exit, Slack holding (Retry-After 3600)  median {h:5.2f} s "
              f"(max {max(held):5.2f})")
        print(f"{signal.Signals(sig).name:8} exit, nothing held (peer)              median {f:5.2f} s "
              f"(max {max(free):5.2f})   ratio held/peer {h / f:4.2f}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
