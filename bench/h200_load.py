"""A small PyTorch load for the H200 probe: matmul bursts, slow memory growth, a pseudo-checkpoint.

Runs ``--seconds`` (default 50); reports through the task SDK when an agent socket is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from gpuwarden.sdk import Task  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=50)
    ap.add_argument("--leak-mib-per-step", type=int, default=0,
                    help="keep this much more GPU memory every step (a leak; 0: +64 MiB per 10 steps, capped)")
    ap.add_argument("--checkpoint-every", type=float, default=0,
                    help="seconds between checkpoints that do not release the leak (0: one, half-way)")
    a = ap.parse_args()
    import torch

    dev = torch.device("cuda")
    task = Task(os.environ.get("GPUWARDEN_TASK", "h200-probe"),
                os.environ.get("GPUWARDEN_TASK_ID", f"probe-{os.getpid()}"))
    x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    kept = []
    end = time.monotonic() + a.seconds
    step = 0
    ckpt_at = time.monotonic() + (a.checkpoint_every or a.seconds / 2)
    while time.monotonic() < end:
        t0 = time.perf_counter()
        with task.step() as s:
            with s.data():
                time.sleep(0.02)
            for _ in range(20):
                y = x @ x
            torch.cuda.synchronize()
        step += 1
        if a.leak_mib_per_step:
            kept.append(torch.ones(a.leak_mib_per_step << 20, dtype=torch.uint8, device=dev))
        elif step % 10 == 0 and len(kept) < 40:
            kept.append(torch.empty(64 << 20, dtype=torch.uint8, device=dev))  # +64 MiB every ~10 steps
        if ckpt_at and time.monotonic() >= ckpt_at:
            ckpt_at = time.monotonic() + a.checkpoint_every if a.checkpoint_every else 0
            with task.checkpoint():
                y.float().cpu()  # a copy to host memory, as saving a checkpoint makes
        time.sleep(max(0.0, 0.2 - (time.perf_counter() - t0)))
    held = sum(t.numel() for t in kept) >> 20
    print(f"h200_load: {step} steps, kept {held} MiB", flush=True)


if __name__ == "__main__":
    main()
