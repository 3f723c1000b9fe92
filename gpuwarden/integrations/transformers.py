"""Hugging Face ``Trainer`` → the task SDK: ``Trainer(..., callbacks=[GpuwardenCallback()])``.

A step is one optimizer step (``state.global_step``), all its gradient-accumulation micro-batches.
The Trainer fetches a step's micro-batches before ``on_step_begin``, so the data wait is the time
from the last hook before it (the previous step's end, or its logging, evaluation or save) to
``on_step_begin``. Throughput is tokens/s when ``TrainingArguments(include_num_input_tokens_seen=...)``
counts tokens, else samples/s from the batch size (the last batch of an epoch counted full).
A checkpoint begins at the last hook before the save (the Trainer decides to save in
``on_step_end``/``on_epoch_end``, then logs and evaluates first) and ends at ``on_save``; a save
decided after evaluation (``save_strategy="best"``) is reported at ``on_save`` with no length.
The Trainer has no hook for an exception, so the callback chains ``sys.excepthook`` while training:
an exception that ends the process is reported as its exit. Imports transformers and
``gpuwarden.sdk`` only.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from gpuwarden.integrations.reporter import Reporter, parameters, shape_of
from gpuwarden.sdk import Task


class GpuwardenCallback(TrainerCallback):
    """Steps, data wait, checkpoints, throughput (rank 0, job-wide), the model size, and exit.

    ``params`` overrides the parameter count (under DeepSpeed ZeRO-3 the local count is not the
    model's)."""

    def __init__(self, task: str | None = None, task_id: str | None = None, *, params: int | None = None,
                 throughput_every_s: float = 10.0, socket_path: str | None = None) -> None:
        self.params = params
        self.reporter = Reporter(Task(task, task_id, socket_path), throughput_every_s=throughput_every_s, main=True)

    def on_train_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       model: Any = None, **kwargs: Any) -> None:
        self.reporter.main = state.is_world_process_zero
        self.reporter.flush()  # nothing trained yet: the first throughput window starts here
        self._model = (self.params or parameters(model), *shape_of(model))
        self._tokens_seen = state.num_input_tokens_seen
        self._mark = time.perf_counter()
        self._previous_hook = sys.excepthook
        sys.excepthook = self._excepthook

    def on_epoch_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        self._mark = time.perf_counter()

    def on_step_begin(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                      **kwargs: Any) -> None:
        now = time.perf_counter()
        self._wait, self._begin, self._micro = now - self._mark, now, 1

    def on_substep_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                       **kwargs: Any) -> None:
        self._micro += 1

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        now = time.perf_counter()
        tokens = state.num_input_tokens_seen - self._tokens_seen or None  # job-wide (gathered)
        self._tokens_seen = state.num_input_tokens_seen
        samples = self._micro * args.train_batch_size * args.world_size
        params, layers, hidden = self._model
        self.reporter.model(params, layers=layers, hidden=hidden, seq_len=tokens // samples if tokens else None)
        self.reporter.step(state.global_step, self._wait + now - self._begin, self._wait, samples=samples,
                           tokens=tokens)
        self._mark = now
        self._saving_next(control)

    def on_epoch_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self._mark = time.perf_counter()
        self._saving_next(control)

    def on_log(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
               **kwargs: Any) -> None:
        self._mark = time.perf_counter()
        self._saving_next(control)

    def on_evaluate(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: Any) -> None:
        self._mark = time.perf_counter()
        self._saving_next(control)

    def _saving_next(self, control: TrainerControl) -> None:
        """The handler clears each flag before its hook: a save with nothing left before it is next."""
        if control.should_save and not control.should_log and not control.should_evaluate:
            self.reporter.checkpoint_begin()

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                **kwargs: Any) -> None:
        if not self.reporter.checkpoint_end():
            self.reporter.checkpoint_begin()  # a save not foreseen: said, with no length
            self.reporter.checkpoint_end()
        self._mark = time.perf_counter()

    def on_train_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                     **kwargs: Any) -> None:
        self.reporter.finished()
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous_hook

    def _excepthook(self, kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        self.reporter.failed(exc)
        self._previous_hook(kind, exc, tb)
