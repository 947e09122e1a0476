"""ShardAwareSampler: each epoch a seeded permutation of the dataset, split across DDP ranks, resumable.

By default an epoch is a uniform permutation of every index, so batches mix classes as well as
random sampling on any dataset, whatever order it was written in; each worker's open files stay
bounded by the dataset's handle LRU (`max_open_shards`). For slow storage, `shards_per_window=k`
restricts each stretch of the epoch to k shards (fewer, longer-lived opens; less mixing, see
docs/training.md).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterator, Optional

import numpy as np
import torch.utils.data.distributed

from ..errors import UsageError
from ..order import seeded_permutation
from .splits import shard_ids


class ShardAwareSampler(torch.utils.data.distributed.DistributedSampler):
    """Each epoch: a permutation of all indices (or shards in random windows of `shards_per_window`,
    shuffled within), cut into equal contiguous blocks, one per rank.

    Every index appears exactly once per epoch over all ranks; with several ranks the tail is
    padded by repeating the first indices (drop_last=True drops it instead), as DistributedSampler
    does. Deterministic for (seed, epoch); call set_epoch(e) each epoch. A DistributedSampler, so
    Lightning and other DDP wrappers leave it alone. state_dict()/load_state_dict() resume an epoch
    at the sample where it stopped (torchdata's StatefulDataLoader calls them).
    """

    def __init__(self, dataset: Any, shuffle: bool = True, seed: int = 0,
                 num_replicas: Optional[int] = None, rank: Optional[int] = None,
                 shards_per_window: Optional[int] = None, drop_last: bool = False) -> None:
        # DistributedSampler.__init__ insists on an initialised process group; the fields are set here.
        num_replicas, rank = replica_and_rank(num_replicas, rank)
        if shards_per_window is not None and shards_per_window < 1:
            raise UsageError("shards_per_window must be at least 1 (or None for a full permutation)")
        if int(seed) < 0:
            raise UsageError(f"seed must be 0 or more, not {seed}")
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = int(seed)
        self.num_replicas = num_replicas
        self.rank = rank
        self.shards_per_window = shards_per_window
        self.drop_last = drop_last
        self.epoch = 0
        self.total = len(dataset)
        self._shards = shard_ids(dataset) if shuffle and shards_per_window is not None else None
        if drop_last:
            self.num_samples = self.total // num_replicas
        else:
            self.num_samples = math.ceil(self.total / num_replicas)
        self.total_size = self.num_samples * num_replicas
        #: samples of this rank's block the current iteration has handed out
        self.yielded = 0
        self._resume_at: Optional[int] = None

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order __iter__ yields (a resume position of another epoch is dropped)."""
        if int(epoch) != self.epoch:
            self._resume_at = None
        self.epoch = int(epoch)

    def epoch_order(self) -> np.ndarray:
        """The whole epoch's order over all ranks (before the per-rank cut)."""
        if not self.shuffle:
            return np.arange(self.total, dtype=np.int64)
        if self._shards is None:
            return seeded_permutation(self.total, (self.seed, self.epoch))
        return _windowed_order(self._shards, self.shards_per_window or 1, (self.seed, self.epoch))

    def rank_indices(self) -> np.ndarray:
        """This rank's block of the epoch (padded or cut to num_samples)."""
        order = self.epoch_order()
        if len(order) < self.total_size and len(order):
            order = np.concatenate([order, np.resize(order, self.total_size - len(order))])
        order = order[:self.total_size]
        return order[self.rank * self.num_samples:(self.rank + 1) * self.num_samples]

    def __iter__(self) -> Iterator[int]:
        start, self._resume_at = self._resume_at or 0, None
        block = self.rank_indices()[start:].tolist()     # regenerated and sliced: no sample is read
        self.yielded = start
        for index in block:
            self.yielded += 1
            yield index

    def __len__(self) -> int:
        return self.num_samples

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """Where this rank is in the epoch: enough to continue at the next sample after a restart.

        consumed: samples of this epoch the training loop has used; by default those handed out,
        which is right for StatefulDataLoader. A plain DataLoader with workers fetches ahead, so
        pass batches_done * batch_size there (docs/training.md).
        """
        yielded = self.yielded if consumed is None else int(consumed)
        return {"epoch": self.epoch, "seed": self.seed, "yielded": yielded,
                "num_replicas": self.num_replicas, "rank": self.rank, "total": self.total}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue the saved epoch: the next iteration starts after the samples already yielded."""
        expected = {"seed": self.seed, "num_replicas": self.num_replicas, "total": self.total}
        found = {key: state.get(key) for key in expected}
        if found != expected:
            raise UsageError(f"sampler state is for {found}, this sampler has {expected}; resume with the same "
                             "dataset, seed and number of ranks")
        yielded = int(state["yielded"])
        if not 0 <= yielded <= self.num_samples:
            raise UsageError(f"sampler state has yielded={yielded}, outside 0..{self.num_samples}")
        self.epoch = int(state["epoch"])
        self.yielded = yielded
        self._resume_at = yielded


def _windowed_order(shards: np.ndarray, per_window: int, seed: Any) -> np.ndarray:
    """Shards in a seeded random order, grouped into windows of per_window shards; each window's
    samples shuffled together and laid out one window after another."""
    count = int(shards.max()) + 1 if len(shards) else 0
    shard_rank = np.empty(count, dtype=np.int64)
    shard_rank[seeded_permutation(count, (*seed, 1))] = np.arange(count, dtype=np.int64)
    sample_rank = np.empty(len(shards), dtype=np.int64)
    sample_rank[seeded_permutation(len(shards), (*seed, 2))] = np.arange(len(shards), dtype=np.int64)
    return np.lexsort((sample_rank, shard_rank[shards] // per_window)).astype(np.int64)


def replica_and_rank(num_replicas: Optional[int], rank: Optional[int]) -> "tuple[int, int]":
    """(num_replicas, rank): the given ones, the rest from torch.distributed when it is initialised
    (else one replica, rank 0); UsageError for a rank outside [0, num_replicas)."""
    if num_replicas is None or rank is None:
        world, current = _distributed_defaults()
        num_replicas = world if num_replicas is None else num_replicas
        rank = current if rank is None else rank
    if num_replicas < 1 or not 0 <= rank < num_replicas:
        raise UsageError(f"invalid rank {rank} for num_replicas {num_replicas}")
    return num_replicas, rank


def _distributed_defaults() -> "tuple[int, int]":
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0
