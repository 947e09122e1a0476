"""Lightning DDP on CPU with ShardAwareSampler, run as a script (Lightning starts rank 1 by running it again):

    python tests/training/lightning_run.py DST OUT_PREFIX

Each rank writes OUT_PREFIX.<rank>.json: the CRC32 of every sample it trained on, the sampler class
the train loader ended up with, and whether Lightning installed its worker seeding.
"""
from __future__ import annotations

import json
import sys
import zlib

import lightning
import torch

import shardkit


def sample_crc(payload) -> torch.Tensor:
    """Transform: a sample's identity (the CRC32 of its stored bytes)."""
    return torch.tensor(zlib.crc32(bytes(memoryview(payload))), dtype=torch.int64)


class Data(lightning.LightningDataModule):
    def __init__(self, dst: str) -> None:
        super().__init__()
        self.dst = dst

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        ds = shardkit.open_dataset(self.dst, decode=None, transform=sample_crc)
        return torch.utils.data.DataLoader(ds, batch_size=8, num_workers=1, sampler=shardkit.ShardAwareSampler(ds))


class Model(lightning.LightningModule):
    def __init__(self, out: str) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.out = out
        self.seen: list = []

    def training_step(self, batch, batch_idx):
        crcs, labels = batch
        self.seen.extend(crcs.tolist())
        return (self.weight * labels.float()).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_epoch_end(self) -> None:
        loader = self.trainer.train_dataloader
        with open(f"{self.out}.{self.global_rank}.json", "w") as handle:
            json.dump({"seen": self.seen, "sampler": type(loader.sampler).__name__,
                       "world": self.trainer.world_size, "worker_init_fn": loader.worker_init_fn is not None}, handle)


if __name__ == "__main__":
    lightning.seed_everything(0, workers=True)
    trainer = lightning.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=1, logger=False,
                                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Model(sys.argv[2]), Data(sys.argv[1]))
