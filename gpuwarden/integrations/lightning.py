"""PyTorch Lightning → the task SDK: ``Trainer(callbacks=[GpuwardenCallback()])``.

A step is one training batch, its data wait and its compute. The loop fetches the next batch (and
moves it to the device) last before ``on_train_batch_start``, after any validation and checkpoint,
so the data wait runs from the last of the previous batch's end, a validation's end and a
checkpoint's end, to ``on_train_batch_start``. A checkpoint runs from ``on_save_checkpoint``
(Lightning calls it once the state is gathered, just before the write: there is no earlier hook)
to the strategy's writer returning; ranks and strategies that do not write through
``strategy.checkpoint_io`` (ranks other than 0, DeepSpeed) end it at the next hook, an upper bound. Times are the host's clock, without a device synchronisation (one per step would
slow training). Imports Lightning and ``gpuwarden.sdk`` only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.plugins.io import CheckpointIO

from gpuwarden.integrations.reporter import Reporter, parameters, shape_of
from gpuwarden.sdk import Task

BatchCount = Callable[[Any], int]


class GpuwardenCallback(Callback):
    """Steps, data wait, checkpoints, throughput (rank 0, job-wide), the model size, and exit.

    ``tokens(batch)`` makes throughput tokens/s (for MFU), else it is samples/s with
    ``samples(batch)`` (default: the first dimension of the batch's first tensor); ``params``
    overrides the parameter count (a sharded model's local count is not the model's)."""

    def __init__(self, task: str | None = None, task_id: str | None = None, *, tokens: BatchCount | None = None,
                 samples: BatchCount | None = None, seq_len: int | None = None, params: int | None = None,
                 throughput_every_s: float = 10.0, socket_path: str | None = None) -> None:
        self.tokens, self.samples, self.seq_len, self.params = tokens, samples or first_dimension, seq_len, params
        # made here so that an exception before setup (another callback's, the data module's) is an exit too
        self.reporter = Reporter(Task(task, task_id, socket_path), throughput_every_s=throughput_every_s, main=True)
        self._io: _TimedCheckpointIO | None = None
        self._training = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        self.reporter.main = trainer.is_global_zero
        if stage == "fit":
            self._io = _TimedCheckpointIO(trainer.strategy.checkpoint_io, self._written)
            trainer.strategy.checkpoint_io = self._io

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self._io is not None and trainer.strategy.checkpoint_io is self._io:
            trainer.strategy.checkpoint_io = self._io.inner
        self._io = None

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._training = True
        self.reporter.flush()  # nothing trained yet: the first throughput window starts here
        self._model = (self.params or parameters(pl_module), *shape_of(pl_module))
        self._mark = self._busy_until = time.perf_counter()

    def on_train_batch_start(self, trainer: Trainer, pl_module: LightningModule, batch: Any, batch_idx: int) -> None:
        self._written()  # a checkpoint not written through checkpoint_io ends here at the latest
        now = time.perf_counter()
        self._wait, self._begin = now - max(self._mark, self._busy_until), now

    def on_train_batch_end(self, trainer: Trainer, pl_module: LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        now = time.perf_counter()
        world = trainer.world_size
        samples = self.samples(batch)
        tokens = self.tokens(batch) if self.tokens else None
        params, layers, hidden = self._model
        self.reporter.model(params, layers=layers, hidden=hidden,
                            seq_len=self.seq_len or (tokens // samples if tokens and samples else None))
        self.reporter.step(trainer.global_step, self._wait + now - self._begin, self._wait,
                           samples=samples and samples * world, tokens=tokens and tokens * world)
        self._mark = now

    def on_validation_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._busy_until = time.perf_counter()

    def on_save_checkpoint(self, trainer: Trainer, pl_module: LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._training:
            self.reporter.checkpoint_begin()

    def _written(self) -> None:
        if self._training and self.reporter.checkpoint_end():
            self._busy_until = time.perf_counter()

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._training = False
        self.reporter.finished()

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._training = False
        self.reporter.failed(exception)


class _TimedCheckpointIO(CheckpointIO):
    """The strategy's own checkpoint writer, telling the callback when a write has returned."""

    def __init__(self, inner: CheckpointIO, written: Callable[[], None]) -> None:
        self.inner, self.written = inner, written

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        try:
            self.inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
        finally:
            self.written()

    def load_checkpoint(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.inner.load_checkpoint(*args, **kwargs)

    def remove_checkpoint(self, path: Any) -> None:
        self.inner.remove_checkpoint(path)

    def teardown(self) -> None:
        self.inner.teardown()


def first_dimension(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (in a tuple, list or dict)."""
    if hasattr(batch, "shape"):
        return int(batch.shape[0]) if len(batch.shape) else 1
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        if n := first_dimension(item):
            return n
    return 0
