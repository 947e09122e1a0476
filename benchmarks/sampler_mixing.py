"""How well ShardAwareSampler orders mix classes, and what they cost in shard opens.

An ImageNet-like layout without files: 1,000 classes x 1,281 samples, about 2,300 samples per
256MB shard (557 shards), stored either class-sorted (`convert --order source`, how image trees
were written before the shuffled default) or shuffled (`--order shuffled`). For each sampler
setting, one epoch (seed 0, epoch 0..--epochs-1):

  distinct   mean distinct classes per batch of --batch-size (a uniform permutation: the ideal)
  opens      shard opens per 1,000 samples of one DataLoader worker with an LRU of --max-open
             handles (batches go round-robin to --workers workers), i.e. the handle churn

    PYTHONPATH=. python benchmarks/sampler_mixing.py

Pure numpy and the sampler itself: no timing, no disk. Results: docs/training.md.
"""
from __future__ import annotations

import argparse
from collections import OrderedDict
from typing import List, Optional

import numpy as np
import torch.utils.data

from shardkit import ShardAwareSampler
from shardkit.order import seeded_permutation


class Layout(torch.utils.data.Dataset):
    """len() and shard_starts of a dataset, nothing else (the sampler needs no more)."""

    def __init__(self, total: int, per_shard: int) -> None:
        self.shard_starts = np.append(np.arange(0, total, per_shard, dtype=np.int64), total)

    def __len__(self) -> int:
        return int(self.shard_starts[-1])


def distinct_per_batch(labels: np.ndarray, order: np.ndarray, batch: int) -> float:
    """Mean distinct labels over the full batches of order."""
    full = len(order) // batch * batch
    rows = np.sort(labels[order[:full]].reshape(-1, batch), axis=1)
    return float(np.mean((np.diff(rows, axis=1) != 0).sum(axis=1) + 1))


def opens_per_1000(shards: np.ndarray, order: np.ndarray, batch: int, workers: int, capacity: int,
                   limit: int) -> float:
    """Shard opens per 1,000 samples seen by worker 0 (LRU of capacity handles), over the first limit samples."""
    mine = [order[start:start + batch] for start in range(0, min(limit, len(order)), batch * workers)]
    cache: "OrderedDict[int, None]" = OrderedDict()
    opens = seen = 0
    for block in mine:
        for shard in shards[block].tolist():
            seen += 1
            if shard in cache:
                cache.move_to_end(shard)
                continue
            opens += 1
            cache[shard] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return 1000.0 * opens / max(1, seen)


def main(argv: Optional[List[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--per-class", type=int, default=1281)
    parser.add_argument("--per-shard", type=int, default=2300)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--max-open", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--open-samples", type=int, default=300_000, help="samples simulated for the opens column")
    args = parser.parse_args(argv)
    total = args.classes * args.per_class
    layout = Layout(total, args.per_shard)
    shards = np.repeat(np.arange(len(layout.shard_starts) - 1), np.diff(layout.shard_starts))
    stored = {"class-sorted": np.repeat(np.arange(args.classes), args.per_class),
              "shuffled": np.repeat(np.arange(args.classes), args.per_class)[seeded_permutation(total, 0)]}
    settings = [("uniform permutation (ideal)", "uniform"), ("new default (full permutation)", None)]
    settings += [(f"shards_per_window={k}" + (" (old default)" if k == 4 else ""), k) for k in (4, 16, 64, 128)]
    print(f"{args.classes} classes x {args.per_class} samples, {len(layout.shard_starts) - 1} shards of "
          f"{args.per_shard}, batch {args.batch_size}; opens: worker 0 of {args.workers}, LRU {args.max_open}")
    print("| sampler | stored order | distinct classes per batch | vs uniform | opens per 1,000 samples |")
    print("|---|---|---|---|---|")
    for name, labels in stored.items():
        uniform = None
        for title, window in settings:
            values, churn = [], []
            for epoch in range(args.epochs):
                if window == "uniform":
                    order = np.random.default_rng(epoch).permutation(total)
                else:
                    sampler = ShardAwareSampler(layout, seed=0, num_replicas=1, rank=0, shards_per_window=window)
                    sampler.set_epoch(epoch)
                    order = sampler.rank_indices()
                values.append(distinct_per_batch(labels, order, args.batch_size))
                churn.append(opens_per_1000(shards, order, args.batch_size, args.workers, args.max_open,
                                            args.open_samples))
            mean = float(np.mean(values))
            uniform = mean if window == "uniform" else uniform
            print(f"| {title} | {name} | {mean:.1f} | {mean / uniform:.2f}x | {np.mean(churn):.1f} |")


if __name__ == "__main__":
    main()
