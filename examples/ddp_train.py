"""Data-parallel training on the shardkit demo tree: torchrun, gloo, ShardAwareSampler with set_epoch.

    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --workdir /tmp/shardkit-ddp
    torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --workdir /tmp/ddp --src /data/images

Rank 0 converts the ImageFolder tree given by --src, or draws the demo tree and converts it (the
others wait at a barrier); every rank then opens the
dataset, and ShardAwareSampler gives each rank an equal block of each epoch's permutation (rank and
world size from torch.distributed). Each epoch the ranks check together that they read every
sample exactly once, and rank 0 prints the loss and samples/s.
"""
from __future__ import annotations

import argparse
import gc
import os
import time
import zlib
from typing import Any, List, Optional

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import shardkit
from shardkit.samples import make_image_tree

SIDE = 32


def to_input(image: torch.Tensor) -> torch.Tensor:
    """3xSIDExSIDE uint8 tensor (stored decoded) -> float in [0, 1]."""
    return image.float() / 255.0


def make_model(classes: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


class WithIdentity(torch.utils.data.Dataset):
    """(input, label, CRC32 of the stored bytes): lets the ranks check they read each sample once."""

    def __init__(self, dst: str) -> None:
        self.raw = shardkit.open_dataset(dst, decode=None)
        self.images = shardkit.open_dataset(dst, decode="tensor", transform=to_input)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Any:
        image, label = self.images[index]
        return image, label, zlib.crc32(bytes(memoryview(self.raw[index][0])))


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="shardkit-ddp")
    parser.add_argument("--src", default=None, help="an ImageFolder tree (default: draw the demo tree)")
    parser.add_argument("--images", type=int, default=400, help="demo tree size")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    dst = os.path.join(args.workdir, "dataset")
    if rank == 0 and not os.path.isfile(os.path.join(dst, "manifest.json")):
        src = args.src or os.path.join(args.workdir, "images")
        if not args.src and not os.path.isdir(src):
            make_image_tree(src, args.images)
        shardkit.convert(src, dst, samples_per_shard=64, image_mode="raw", size=(SIDE, SIDE), quiet=True)
    dist.barrier()
    ds = WithIdentity(dst)
    sampler = shardkit.ShardAwareSampler(ds, seed=0)          # num_replicas and rank from torch.distributed
    # forkserver: a rank runs gloo's threads, and forking a process with threads (DataLoader's
    # default on Linux) can leave a worker waiting for a lock that no thread of it will release
    context = "forkserver" if args.workers else None
    loader = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                                         multiprocessing_context=context)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make_model(len(ds.images.classes)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)                               # a new permutation, the same on every rank
        started, losses, identities = time.perf_counter(), [], []
        for images, labels, crcs in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            identities.extend(crcs.tolist())
        rate = torch.tensor([len(identities) / (time.perf_counter() - started)])
        dist.all_reduce(rate)
        gathered: List[Any] = [None] * world
        dist.all_gather_object(gathered, identities)
        if rank == 0:
            together = [crc for part in gathered for crc in part]
            print(f"epoch {epoch}: loss {np.mean(losses):.3f}; {world} ranks read {len(together)} samples, "
                  f"{len(set(together))} distinct, of {len(ds)}; {float(rate):.0f} samples/s")
    # Tear down in order: every rank done communicating, then DDP (which holds the process group)
    # freed while Python is fully alive, then the group. Left to interpreter exit, gloo's threads
    # can be destroyed mid-teardown and abort the process after a run that went well.
    dist.barrier()
    del model, optimizer, loader
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
