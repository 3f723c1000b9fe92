"""A small PyTorch load for the H200 probe: matmul bursts, slow memory growth, a pseudo-checkpoint.

Runs ``--seconds`` (default 50); reports through the task SDK when an agent socket is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from producers.tasksdk import Task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=50)
    a = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    task = Task("h200-probe", f"probe-{os.getpid()}")
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    kept = []
    end = time.monotonic() + a.seconds
    step = 0
    ckpt_at = time.monotonic() + a.seconds / 2
    while time.monotonic() < end:
        t0 = time.perf_counter()
        with task.step() as s:
            with s.data():
                time.sleep(0.02)
            for _ in range(20):
                y = x @ x
            torch.cuda.synchronize()
        step += 1
        if step % 10 == 0 and len(kept) < 40:
            kept.append(torch.empty(64 << 20, dtype=torch.uint8, device=dev))  # +64 MiB every ~10 steps
        if ckpt_at and time.monotonic() >= ckpt_at:
            ckpt_at = 0
            with task.checkpoint():
                staging = y.float().cpu()
                del staging
        time.sleep(max(0.0, 0.2 - (time.perf_counter() - t0)))
    print(f"h200_load: {step} steps, kept {len(kept) * 64} MiB", flush=True)


if __name__ == "__main__":
    main()
