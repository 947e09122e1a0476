"""ShardAwareSampler: a shuffled epoch order that keeps reads local to a few open shards."""
from __future__ import annotations

import math
from typing import Any, Iterator, Optional

import numpy as np
import torch.utils.data

from .errors import UsageError


class ShardAwareSampler(torch.utils.data.Sampler):
    """Each epoch: shards in a random order, samples shuffled within windows of a few shards.

    Every index appears exactly once per epoch (num_replicas=1). With several replicas the
    order is cut into equal contiguous blocks, one per rank; the tail is padded by repeating
    the first indices (drop_last=True drops it instead), as DistributedSampler does.
    Deterministic for (seed, epoch); call set_epoch(e) each epoch.
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 window_shards: int = 4, drop_last: bool = False) -> None:
        if num_replicas is None or rank is None:
            world, current = _distributed_defaults()
            num_replicas = world if num_replicas is None else num_replicas
            rank = current if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise UsageError(f"invalid rank {rank} for num_replicas {num_replicas}")
        if window_shards < 1:
            raise UsageError("window_shards must be at least 1")
        self.shard_starts = np.asarray(dataset.shard_starts, dtype=np.int64)
        self.shuffle = shuffle
        self.seed = int(seed)
        self.num_replicas = num_replicas
        self.rank = rank
        self.window_shards = window_shards
        self.drop_last = drop_last
        self.epoch = 0
        total = int(self.shard_starts[-1])
        if drop_last:
            self.num_samples = total // num_replicas
        else:
            self.num_samples = math.ceil(total / num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order __iter__ yields."""
        self.epoch = int(epoch)

    def epoch_order(self) -> np.ndarray:
        """The whole epoch's order over all ranks (before the per-rank cut)."""
        starts = self.shard_starts
        num_shards = len(starts) - 1
        if not self.shuffle:
            return np.arange(int(starts[-1]), dtype=np.int64)
        rng = np.random.default_rng([self.seed, self.epoch])
        shard_order = rng.permutation(num_shards)
        pieces = []
        for first in range(0, num_shards, self.window_shards):
            window = shard_order[first:first + self.window_shards]
            indices = np.concatenate([np.arange(starts[s], starts[s + 1], dtype=np.int64) for s in window])
            pieces.append(rng.permutation(indices))
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        order = self.epoch_order()
        wanted = self.num_samples * self.num_replicas
        if len(order) < wanted and len(order):
            order = np.concatenate([order, np.resize(order, wanted - len(order))])
        order = order[:wanted]
        block = order[self.rank * self.num_samples:(self.rank + 1) * self.num_samples]
        return iter(block.tolist())

    def __len__(self) -> int:
        return self.num_samples


def _distributed_defaults() -> "tuple[int, int]":
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
