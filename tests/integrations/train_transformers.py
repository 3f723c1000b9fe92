"""Run by tests/integrations/test_frameworks.py in the frameworks venv: a 2-layer GPT-2 built from a
GPT2Config here (no download: HF_HUB_OFFLINE), trained on CPU for 6 steps on random token ids whose
dataset sleeps SLEEP_S per batch (in its samples), saving every 3 steps and counting tokens; then one whose dataset
raises in its 2nd step, uncaught, so the process ends on it (exit status 1). Prints the datagrams
the SDK dropped in the first run and the model's parameter count as JSON before the second starts."""

from __future__ import annotations

import json
import sys
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from gpuwarden.integrations.transformers import GpuwardenCallback

BATCH, SEQ, SLEEP_S, STEPS = 4, 16, 0.02, 6


class Slow(Dataset):
    def __init__(self, fail_at_item: int | None = None) -> None:
        self.items, self.fail_at_item = 0, fail_at_item

    def __len__(self) -> int:
        return BATCH * STEPS

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        self.items += 1
        if self.items == self.fail_at_item:
            raise RuntimeError("boom in the third batch")
        time.sleep(SLEEP_S / BATCH)  # the sampler shuffles: every sample waits its share
        ids = torch.randint(0, 100, (SEQ,))
        return {"input_ids": ids, "labels": ids}


def args(out: str) -> TrainingArguments:
    return TrainingArguments(output_dir=out, max_steps=STEPS, per_device_train_batch_size=BATCH, use_cpu=True,
                             save_strategy="steps", save_steps=3, save_only_model=True, logging_steps=2,
                             include_num_input_tokens_seen=True, report_to="none", disable_tqdm=True,
                             dataloader_num_workers=0)


def main(out: str) -> None:
    config = GPT2Config(vocab_size=100, n_positions=SEQ, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    ok, model = GpuwardenCallback(throughput_every_s=0.05), GPT2LMHeadModel(config)
    Trainer(model=model, args=args(f"{out}/ok"), train_dataset=Slow(), callbacks=[ok]).train()
    print(json.dumps({"dropped": ok.reporter.task.dropped, "params": sum(p.numel() for p in model.parameters())}), flush=True)
    bad = GpuwardenCallback(task_id="transformers-fails")
    # accelerate's loader fetches one batch ahead: the third batch is fetched in the second step
    Trainer(model=GPT2LMHeadModel(config), args=args(f"{out}/bad"), train_dataset=Slow(fail_at_item=2 * BATCH + 1),
            callbacks=[bad]).train()


if __name__ == "__main__":
    main(sys.argv[1])
