"""Train a compact CNN on an ImageFolder tree through shardkit, on CPU, and resume mid-epoch exactly.

    python examples/train_imagefolder.py --workdir /tmp/shardkit-train              # draws the demo tree
    python examples/train_imagefolder.py --workdir /tmp/shardkit-train --stop-at 120  # "crash" at step 120
    python examples/train_imagefolder.py --workdir /tmp/shardkit-train --resume       # continue from it

Steps: draw the built-in demo tree (4 classes) unless --src is given, convert it to 32x32 arrays
(--image-mode raw: nothing to decode while training; samples in a
seeded shuffled order), split train/validation with shardkit.train_val_split, and train with
ShardAwareSampler. A checkpoint (model, optimizer, sampler position) is written every
--checkpoint-every steps and at --stop-at; --resume continues from it at the next sample of the
same epoch, so an interrupted run ends with the same weights as an uninterrupted one.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import time
from typing import Any, Dict, List, Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import shardkit
from shardkit.samples import make_image_tree

SIDE = 32


def to_input(image: torch.Tensor) -> torch.Tensor:
    """3xSIDExSIDE uint8 tensor (stored decoded: nothing to decode at read time) -> float in [0, 1]."""
    return image.float() / 255.0


class SmallCNN(nn.Module):
    """Three strided convolutions, global pooling, one linear layer."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU())
        self.head = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))


def prepare(args: argparse.Namespace) -> str:
    """The converted dataset's folder (drawing and converting the demo tree the first time)."""
    src = args.src or os.path.join(args.workdir, "images")
    dst = os.path.join(args.workdir, "dataset")
    if not args.src and not os.path.isdir(src):
        make_image_tree(src, args.images)
    if not os.path.isfile(os.path.join(dst, "manifest.json")):
        # decoded once, to SIDExSIDE arrays: training reads need no JPEG decoding
        shardkit.convert(src, dst, samples_per_shard=64, image_mode="raw", size=(SIDE, SIDE), workers=2, quiet=True)
    return dst


def make_loader(train: Any, sampler: shardkit.ShardAwareSampler, args: argparse.Namespace) -> Any:
    """Workers live across epochs; each epoch's iterator asks the sampler for its order afresh."""
    return torch.utils.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                                       persistent_workers=args.workers > 0, drop_last=True)


def evaluate(model: nn.Module, val: Any, args: argparse.Namespace) -> float:
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in torch.utils.data.DataLoader(val, batch_size=64, num_workers=args.workers):
            correct += int((model(images).argmax(1) == labels).sum())
            total += len(labels)
    model.train()
    return correct / max(1, total)


def weights_digest(model: nn.Module) -> str:
    """A short hash of every parameter and buffer, to compare runs."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode() + tensor.detach().cpu().numpy().tobytes())
    return digest.hexdigest()[:16]


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="shardkit-train")
    parser.add_argument("--src", default=None, help="an ImageFolder tree (default: draw the demo tree)")
    parser.add_argument("--images", type=int, default=800, help="demo tree size")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--stop-at", type=int, default=None, help="write a checkpoint at this step and stop")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint in --workdir")
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    torch.manual_seed(0)
    ds = shardkit.open_dataset(prepare(args), decode="tensor", transform=to_input)
    train, val = shardkit.train_val_split(ds, val_fraction=0.1, seed=0)
    model = SmallCNN(len(ds.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sampler = shardkit.ShardAwareSampler(train, seed=0, num_replicas=1, rank=0)
    checkpoint_path = os.path.join(args.workdir, "checkpoint.pt")
    step = epoch = 0
    if args.resume:
        state: Dict[str, Any] = torch.load(checkpoint_path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        sampler.load_state_dict(state["sampler"])     # the epoch and the samples already used
        step, epoch = state["step"], state["sampler"]["epoch"]
        print(f"resumed at step {step}, epoch {epoch}, sample {state['sampler']['yielded']} of {len(sampler)}")
    losses: List[float] = []
    seen, started = 0, time.perf_counter()
    resumed_samples = sampler.yielded if args.resume else 0
    loader = make_loader(train, sampler, args)
    while step < args.steps:
        sampler.set_epoch(epoch)                      # keeps a loaded position within the same epoch
        done_in_epoch, resumed_samples = resumed_samples, 0
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            step += 1
            seen += len(labels)
            done_in_epoch += len(labels)
            if step % args.checkpoint_every == 0 or step == args.stop_at or step == args.steps:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                            # workers fetch ahead: record the samples this loop has used
                            "sampler": sampler.state_dict(consumed=done_in_epoch)}, checkpoint_path)
            if step % 50 == 0:
                print(f"step {step:4d}  epoch {epoch}  loss {np.mean(losses[-50:]):.3f}")
            if step == args.stop_at:
                print(f"stopped at step {step}; checkpoint in {checkpoint_path}")
                return
            if step == args.steps:
                break
        else:
            epoch += 1
    rate = seen / (time.perf_counter() - started)
    window = max(1, min(50, len(losses) // 3))
    print(f"loss first {np.mean(losses[:window]):.3f} -> last {np.mean(losses[-window:]):.3f}")
    print(f"{rate:.0f} samples/s; validation accuracy {evaluate(model, val, args):.2f}")
    print(f"weights {weights_digest(model)}")


if __name__ == "__main__":
    main()
