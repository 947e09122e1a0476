"""ShardAwareSampler: each epoch a seeded permutation of the dataset, split across DDP ranks, resumable.

By default an epoch is a uniform permutation of every index, so batches mix classes as well as
random sampling on any dataset, whatever order it was written in; each worker's open files stay
bounded by the dataset's handle LRU (`max_open_shards`). For slow storage, `shards_per_window=k`
restricts each stretch of the epoch to k shards (fewer, longer-lived opens; less mixing, see
docs/training.md).

Over a dataset at a URL, the sampler (in the main process, ahead of the DataLoader workers) asks
the dataset's cache to prefetch shards in the order the epoch first needs them, PREFETCH_AHEAD
shards beyond the newest one reached; the workers find them in the machine's shared cache.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

import numpy as np

from ..errors import UsageError
from ..order import seeded_permutation
from .epochs import EpochSampler, replica_and_rank
from .splits import shard_ids

#: Shards, in the order of their first use, that the sampler asks a remote dataset to prefetch
#: beyond the newest one its order has reached.
PREFETCH_AHEAD = 2


class ShardAwareSampler(EpochSampler):
    """Each epoch: a permutation of all indices (or shards in random windows of `shards_per_window`,
    shuffled within), cut into equal contiguous blocks, one per rank.

    Every index appears exactly once per epoch over all ranks; with several ranks the tail is
    padded by repeating the first indices (drop_last=True drops it instead), as DistributedSampler
    does. Deterministic for (seed, epoch); call set_epoch(e) each epoch. A DistributedSampler, so
    Lightning and other DDP wrappers leave it alone. state_dict()/load_state_dict() resume an epoch
    at the sample where it stopped (torchdata's StatefulDataLoader calls them), also on another
    number of ranks (read/epochs.py).
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shards_per_window: Optional[int] = None, drop_last: bool = False) -> None:
        num_replicas, rank = replica_and_rank(num_replicas, rank)
        if shards_per_window is not None and shards_per_window < 1:
            raise UsageError("shards_per_window must be at least 1 (or None for a full permutation)")
        super().__init__(dataset, len(dataset), seed, num_replicas, rank, drop_last)
        self.shuffle = shuffle
        self.shards_per_window = shards_per_window
        self._shards = shard_ids(dataset) if shuffle and shards_per_window is not None else None

    def epoch_order(self) -> np.ndarray:
        """The whole epoch's order over all ranks (before the per-rank cut)."""
        if not self.shuffle:
            return np.arange(self.total, dtype=np.int64)
        if self._shards is None:
            return seeded_permutation(self.total, (self.seed, self.epoch))
        return _windowed_order(self._shards, self.shards_per_window or 1, (self.seed, self.epoch))

    def items(self, block: np.ndarray) -> Iterable[Any]:
        """The block's indices; over a dataset at a URL, yielded while prefetching its shards."""
        if getattr(self.dataset, "remote_cache", None) is None:
            return block.tolist()
        return _prefetching(block, self.dataset)


def _prefetching(block: np.ndarray, dataset: Any) -> Iterator[int]:
    """block's indices, asking dataset to prefetch the next PREFETCH_AHEAD shards (in the order of
    their first use in block) each time the order reaches a shard for the first time."""
    shards = np.searchsorted(dataset.shard_starts, block, side="right") - 1
    firsts = np.sort(np.unique(shards, return_index=True)[1])
    sequence = shards[firsts].tolist()
    reached = 0
    for position, index in enumerate(block.tolist()):
        if reached < len(firsts) and position == firsts[reached]:
            reached += 1
            dataset.prefetch(sequence[reached:reached + PREFETCH_AHEAD])
        yield index


def _windowed_order(shards: np.ndarray, per_window: int, seed: Any) -> np.ndarray:
    """Shards in a seeded random order, grouped into windows of per_window shards; each window's
    samples shuffled together and laid out one window after another."""
    count = int(shards.max()) + 1 if len(shards) else 0
    shard_rank = np.empty(count, dtype=np.int64)
    shard_rank[seeded_permutation(count, (*seed, 1))] = np.arange(count, dtype=np.int64)
    sample_rank = np.empty(len(shards), dtype=np.int64)
    sample_rank[seeded_permutation(len(shards), (*seed, 2))] = np.arange(len(shards), dtype=np.int64)
    return np.lexsort((sample_rank, shard_rank[shards] // per_window)).astype(np.int64)
