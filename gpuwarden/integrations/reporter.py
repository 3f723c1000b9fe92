"""What both framework callbacks send through the task SDK, apart from how each reads its hooks.

Standard library and ``gpuwarden.sdk`` only. Throughput is the work done over the wall time
between two reports (validation and checkpoints included), because ``report usage`` holds each
reported rate until the next one: the tokens it counts are then the tokens trained. Only the
process that speaks for the whole job (global rank 0) reports throughput and the model, with
the job-wide figures; every process reports its own steps, checkpoints and exit.
"""

from __future__ import annotations

import time
from typing import Any

from gpuwarden.sdk import Task

INTERRUPTED = 130  # a shell's code for a process ended by SIGINT (Ctrl-C, a scheduler's cancel)


class Reporter:
    def __init__(self, task: Task, *, throughput_every_s: float, main: bool) -> None:
        self.task, self.every_s, self.main = task, throughput_every_s, main
        self._since = time.perf_counter()
        self._samples = self._tokens = 0
        self._model_sent = False
        self._in_checkpoint = False

    def step(self, step: int, step_time_s: float, data_wait_s: float, *, samples: int | None,
             tokens: int | None) -> None:
        """One training step; ``samples``/``tokens`` are the job-wide counts (None: unknown)."""
        self.task.report_step(step_time_s, data_wait_s=data_wait_s, step=step)
        self._samples += samples or 0
        self._tokens += tokens or 0
        if self.main and time.perf_counter() - self._since >= self.every_s:
            self.flush()

    def model(self, params: int, *, layers: int | None, hidden: int | None, seq_len: int | None) -> None:
        """What the job trains, once (for MFU in ``report usage``)."""
        if self.main and not self._model_sent and params > 0:
            self._model_sent = True
            self.task.model(float(params), layers=layers, hidden=hidden, seq_len=seq_len)

    def flush(self) -> None:
        """Report the throughput since the last report: tokens/s when the tokens are known."""
        now = time.perf_counter()
        elapsed, work = now - self._since, self._tokens or self._samples
        if self.main and work and elapsed > 0:
            self.task.throughput(work / elapsed, "tokens/s" if self._tokens else "samples/s")
        self._since, self._samples, self._tokens = now, 0, 0

    def checkpoint_begin(self) -> None:
        if not self._in_checkpoint:
            self._in_checkpoint = True
            self.task.checkpoint_begin()

    def checkpoint_end(self) -> bool:
        """End the open checkpoint; False when none was open."""
        if not self._in_checkpoint:
            return False
        self._in_checkpoint = False
        self.task.checkpoint_end()
        return True

    def finished(self) -> None:
        self.checkpoint_end()
        self.flush()
        self.task.exit(0)

    def failed(self, exc: BaseException) -> None:
        """Training ended by an exception: an OOM is said as such, Ctrl-C gets the shell's 130."""
        self.checkpoint_end()
        self.flush()
        message = f"{type(exc).__name__}: {exc}"[:1000]
        if type(exc).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError, torch.cuda's alias
            self.task.oom(message)
        self.task.exit(INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1, message)


def shape_of(model: Any) -> tuple[int | None, int | None]:
    """Layers and hidden size from a Hugging Face config on the model or a submodule, if any."""
    for module in model.modules():
        config = getattr(module, "config", None)
        layers = getattr(config, "num_hidden_layers", None)
        hidden = getattr(config, "hidden_size", None)
        if isinstance(layers, int) and isinstance(hidden, int):
            return layers, hidden
    return None, None


def parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())
