"""Epoch orders cut into rank blocks, and what is left of an epoch after a restart on another
number of ranks: the base of ShardAwareSampler and the mixed dataset's sampler.

An epoch is an order (an array); with R ranks it is padded as DistributedSampler pads (repeating
its start) or cut (drop_last) to R equal contiguous blocks. A restart records *layers*: each is
(ranks, samples each rank had consumed, drop_last). What a layer leaves is the order without the
positions its ranks read, kept in epoch order; the next layer cuts that into blocks for its own
number of ranks. Ranks of one DDP job consume in lockstep (each takes the same number of batches
per step), so one rank's count stands for all of them.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np
import torch.utils.data.distributed

from ..errors import UsageError

#: (ranks, samples each rank consumed, drop_last) of one stretch of an epoch between restarts.
Layer = Tuple[int, int, bool]


def per_rank(count: int, replicas: int, drop_last: bool) -> int:
    """Samples each of `replicas` ranks takes from an order of `count`."""
    return count // replicas if drop_last else math.ceil(count / replicas)


def padded_positions(count: int, replicas: int, drop_last: bool) -> np.ndarray:
    """Positions of an order of `count` as the ranks take them, one block after another: cut to a
    multiple of replicas, or padded by repeating the first positions."""
    total = per_rank(count, replicas, drop_last) * replicas
    positions = np.arange(total, dtype=np.int64)
    return positions % count if count else positions


def rank_block(order: np.ndarray, replicas: int, rank: int, drop_last: bool) -> np.ndarray:
    """Rank `rank`'s contiguous block of order (padded or cut as padded_positions says)."""
    size = per_rank(len(order), replicas, drop_last)
    return order[padded_positions(len(order), replicas, drop_last)[rank * size:(rank + 1) * size]]


def left_after(order: np.ndarray, replicas: int, consumed: int, drop_last: bool) -> np.ndarray:
    """The entries of order that no rank had read once each had consumed `consumed` of its block
    (epoch order kept; positions read through padding count as read)."""
    size = per_rank(len(order), replicas, drop_last)
    if consumed <= 0 or not len(order):
        return order
    taken = padded_positions(len(order), replicas, drop_last).reshape(replicas, size)[:, :consumed]
    keep = np.ones(len(order), dtype=bool)
    keep[taken.ravel()] = False
    return order[keep]


def checked_layers(raw: Any) -> List[Layer]:
    """The layers of a saved state, each checked; UsageError for anything else."""
    layers: List[Layer] = []
    for item in raw or []:
        if not (isinstance(item, (list, tuple)) and len(item) == 3 and all(isinstance(v, int) for v in item[:2])
                and item[0] >= 1 and item[1] >= 0):
            raise UsageError(f"sampler state has a malformed resume record {item!r}")
        layers.append((int(item[0]), int(item[1]), bool(item[2])))
    return layers


class EpochSampler(torch.utils.data.distributed.DistributedSampler):
    """A DistributedSampler over an epoch order that subclasses define (epoch_order()), with
    exact mid-epoch resume on the same or another number of ranks."""

    def __init__(self, dataset: Any, total: int, seed: int, num_replicas: int, rank: int,
                 drop_last: bool) -> None:
        # DistributedSampler.__init__ insists on an initialised process group; the fields are set here.
        if int(seed) < 0:
            raise UsageError(f"seed must be 0 or more, not {seed}")
        self.dataset = dataset
        self.seed = int(seed)
        self.num_replicas = num_replicas
        self.rank = rank
        self.drop_last = drop_last
        self.epoch = 0
        self.total = total
        self.num_samples = per_rank(total, num_replicas, drop_last)
        self.total_size = self.num_samples * num_replicas
        #: samples of this rank's block the current iteration has handed out
        self.yielded = 0
        self._layers: List[Layer] = []            # restarts of the epoch being read
        self._resume: Optional[Tuple[List[Layer], int]] = None

    def epoch_order(self) -> np.ndarray:
        """The whole epoch's order over all ranks (before the per-rank cut)."""
        raise NotImplementedError

    def identity(self) -> Dict[str, Any]:
        """What a saved state must match to be loaded here (the same data and order)."""
        return {"seed": self.seed, "total": self.total}

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order __iter__ yields (a resume position of another epoch is dropped)."""
        if int(epoch) != self.epoch:
            self._resume = None
            self._layers = []
        self.epoch = int(epoch)

    def rank_indices(self) -> np.ndarray:
        """This rank's block of the epoch: after a restart, its block of what the epoch has left."""
        order = self.epoch_order()
        for replicas, consumed, drop_last in self._layers:
            order = left_after(order, replicas, consumed, drop_last)
        return rank_block(order, self.num_replicas, self.rank, self.drop_last)

    def __iter__(self) -> Iterator[Any]:
        self._layers, start = self._resume or ([], 0)
        self._resume = None
        block = self.rank_indices()[start:]       # regenerated and sliced: no sample is read
        self.yielded = start
        for item in self.items(block):
            self.yielded += 1
            yield item

    def items(self, block: np.ndarray) -> Iterable[Any]:
        """What the sampler yields for a block of the order (indices, by default)."""
        return block.tolist()

    def __len__(self) -> int:
        return self.num_samples

    def state_dict(self, consumed: Optional[int] = None) -> Dict[str, Any]:
        """Where this rank is in the epoch: enough to continue at the next sample after a restart,
        on this or another number of ranks.

        consumed: samples of this epoch the training loop has used; by default those handed out,
        which is right for StatefulDataLoader. A plain DataLoader with workers fetches ahead, so
        pass batches_done * batch_size there (docs/training.md).
        """
        yielded = self.yielded if consumed is None else int(consumed)
        return {**self.identity(), "epoch": self.epoch, "yielded": yielded, "num_replicas": self.num_replicas,
                "rank": self.rank, "drop_last": self.drop_last, "resumed": [list(layer) for layer in self._layers]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue the saved epoch after the samples already consumed. With the number of ranks it
        was saved with, each rank continues its own block; with another, the ranks split what the
        epoch has left (every sample not yet read, once). state: this sampler's state_dict(), or a
        StatefulDataLoader's state holding it (torchdata refuses to load its own state into a
        loader with another number of workers; the sampler takes it)."""
        state = sampler_state(state)
        expected = self.identity()
        found = {key: state.get(key) for key in expected}
        if found != expected:
            raise UsageError(f"sampler state is for {found}, this sampler has {expected}; resume with the same "
                             "dataset and seed")
        layers = checked_layers(state.get("resumed"))
        yielded, replicas = state.get("yielded"), state.get("num_replicas")
        if not isinstance(replicas, int) or replicas < 1:
            raise UsageError(f"sampler state has num_replicas={replicas!r}")
        bound = per_rank(self.total, replicas, False)
        if not isinstance(yielded, int) or not 0 <= yielded <= bound:
            raise UsageError(f"sampler state has yielded={yielded!r}, outside 0..{bound}")
        drop_last = bool(state.get("drop_last", self.drop_last))
        if replicas == self.num_replicas and drop_last == self.drop_last:
            self._resume = (layers, yielded)
        else:
            self._resume = (layers + [(replicas, yielded, drop_last)], 0)
        self.epoch = int(state["epoch"])
        self._layers, self.yielded = self._resume[0], self._resume[1]


def sampler_state(state: Any) -> Dict[str, Any]:
    """The sampler's own state: state itself, or the one nested in a StatefulDataLoader's state."""
    found = _nested_state(state)
    if found is None:
        raise UsageError("no sampler state found in the state given (a sampler's state_dict(), or a "
                         "StatefulDataLoader state_dict() of a loader using this sampler)")
    return found


def _nested_state(state: Any) -> Optional[Dict[str, Any]]:
    if not isinstance(state, dict):
        return None
    if "yielded" in state and "num_replicas" in state:
        return state
    for value in state.values():
        found = _nested_state(value)
        if found is not None:
            return found
    return None


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
