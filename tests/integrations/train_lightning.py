"""Run by tests/integrations/test_frameworks.py in the frameworks venv: a 2-layer LightningModule built
here, trained on CPU for 6 steps on random data whose loader sleeps SLEEP_S per batch (in its samples), checkpointing
every 3 steps; then one that raises at its 2nd step (the exception is caught here, so the process
goes on). Prints the datagrams the SDK dropped and the model's parameter count as JSON."""

from __future__ import annotations

import json
import sys
import time

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, Dataset

from gpuwarden.integrations.lightning import GpuwardenCallback

BATCH, SLEEP_S, STEPS = 8, 0.02, 6


class Slow(Dataset):
    def __len__(self) -> int:
        return BATCH * STEPS

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SLEEP_S / BATCH)  # the loader is what the step waits for
        return torch.randn(16), torch.randn(1)


class Tiny(LightningModule):
    def __init__(self, fail_at: int | None = None) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
        self.fail_at = fail_at

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if batch_idx == self.fail_at:
            raise RuntimeError("boom at the second batch")
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(callback: GpuwardenCallback, checkpoints: str) -> Trainer:
    return Trainer(accelerator="cpu", devices=1, max_steps=STEPS, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, callbacks=[callback, ModelCheckpoint(
                       dirpath=checkpoints, every_n_train_steps=3, save_top_k=-1)])


def main(out: str) -> None:
    ok = GpuwardenCallback(throughput_every_s=0.05)
    trainer(ok, f"{out}/ok").fit(Tiny(), DataLoader(Slow(), batch_size=BATCH))
    bad = GpuwardenCallback(task_id="lightning-fails", throughput_every_s=0.05)
    try:
        trainer(bad, f"{out}/bad").fit(Tiny(fail_at=1), DataLoader(Slow(), batch_size=BATCH))
    except RuntimeError:
        pass
    dropped = ok.reporter.task.dropped + bad.reporter.task.dropped
    print(json.dumps({"dropped": dropped, "params": sum(p.numel() for p in Tiny().parameters())}))


if __name__ == "__main__":
    main(sys.argv[1])
