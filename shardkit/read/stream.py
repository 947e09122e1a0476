"""ShardStream: an IterableDataset that reads whole shards front to back, for shared or slow storage.

The epoch's order, on every rank alike (deterministic for seed and epoch):
1. shards in a random order (the stored order when shuffle=False), their samples in stored order;
2. padded as DistributedSampler pads: with R ranks each rank yields ceil(N / R) samples, the
   missing ones repeating the start of the order (drop_last=True: floor(N / R), the tail dropped);
3. rank r takes the r-th contiguous block of that order, and splits it again into contiguous
   blocks, one per DataLoader worker. A block is cut at a sample, so a shard on a boundary is read
   by two readers, each its own part; no sample is read twice (padding aside), and a reader
   whose block is empty (fewer samples than ranks x workers) simply ends: nothing waits on it;
4. each reader shuffles its samples through a buffer of `shuffle_buffer` samples
   (seeded by seed, epoch, rank and worker), reading its shards sequentially.

Mid-epoch resume: state_dict(batches_seen) after the training loop took that many batches of
DataLoader(stream, batch_size=stream.batch_size, num_workers=W) in this epoch; a new stream given
load_state_dict(state) yields exactly the batches that were still to come. DataLoader takes one
batch from each worker in turn (skipping workers that have ended); that rule tells each worker how
many of its samples were already consumed, and a new DataLoader's worker 0 takes the part of
the worker whose turn was next.
"""
from __future__ import annotations

import math
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch.utils.data

from .dataset import open_dataset
from ..errors import UsageError
from .sampler import replica_and_rank

Segment = Tuple[int, int]          # [start, stop) of global sample indices


class ShardStream(torch.utils.data.IterableDataset):
    """Samples of DST shard by shard, split over ranks and DataLoader workers without overlap."""

    def __init__(self, root: "str | os.PathLike[str]", *, shuffle: bool = True, seed: int = 0,
                 shuffle_buffer: int = 1024, batch_size: int = 1, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, drop_last: bool = False, **dataset_options: Any) -> None:
        num_replicas, rank = replica_and_rank(num_replicas, rank)
        if shuffle_buffer < 1 or batch_size < 1:
            raise UsageError("shuffle_buffer and batch_size must be at least 1")
        self.dataset = open_dataset(root, **dataset_options)
        self.shuffle, self.seed, self.shuffle_buffer = shuffle, int(seed), shuffle_buffer
        self.batch_size, self.num_replicas, self.rank, self.drop_last = batch_size, num_replicas, rank, drop_last
        self.epoch = 0
        self._resume_batches = 0
        total = len(self.dataset)
        self.num_samples = total // num_replicas if drop_last else math.ceil(total / num_replicas)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration yields (also ends a pending resume)."""
        if int(epoch) != self.epoch:
            self._resume_batches = 0
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def state_dict(self, batches_seen: int) -> Dict[str, Any]:
        """Where this rank stands after taking `batches_seen` batches of this epoch."""
        return {"epoch": self.epoch, "seed": self.seed, "batches_seen": int(batches_seen),
                "batch_size": self.batch_size, "num_replicas": self.num_replicas, "rank": self.rank}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue the epoch of `state` after its batches_seen batches."""
        for key in ("seed", "batch_size", "num_replicas", "rank"):
            if state[key] != getattr(self, key):
                raise UsageError(f"state_dict was saved with {key}={state[key]!r}, this stream has "
                                 f"{getattr(self, key)!r}")
        self.epoch = int(state["epoch"])
        self._resume_batches = int(state["batches_seen"])

    # ---- the plan ----------------------------------------------------------------------
    def rank_segments(self) -> List[Segment]:
        """This rank's block of the padded epoch order, as runs of global indices."""
        starts = np.asarray(self.dataset.shard_starts, dtype=np.int64)
        shards = np.arange(len(starts) - 1)
        if self.shuffle:
            shards = np.random.default_rng([self.seed, self.epoch]).permutation(shards)
        order = [(int(starts[s]), int(starts[s + 1])) for s in shards if starts[s + 1] > starts[s]]
        total = int(starts[-1])
        wanted = self.num_samples * self.num_replicas
        while total and sum(b - a for a, b in order) < wanted:      # padding repeats the start
            order = order + _cut(order, 0, wanted - sum(b - a for a, b in order))
        first = self.rank * self.num_samples
        return _cut(order, first, first + self.num_samples)

    def worker_segments(self, worker: int, workers: int) -> List[Segment]:
        """Worker `worker` of `workers`: its contiguous share of this rank's block."""
        block = self.rank_segments()
        size = sum(b - a for a, b in block)
        return _cut(block, size * worker // workers, size * (worker + 1) // workers)

    # ---- reading -----------------------------------------------------------------------
    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        counts = [_length(self.worker_segments(w, workers)) for w in range(workers)]
        consumed, first = _consumed(counts, self.batch_size, self._resume_batches)
        # a new DataLoader asks worker 0 first: it plays the part of the worker whose turn was next
        part = (worker + first) % workers
        skip = consumed[part]
        rng = np.random.default_rng([self.seed, self.epoch, self.rank, part])
        for position, (index, encoded) in enumerate(self._shuffled(self.worker_segments(part, workers), rng)):
            if position >= skip:
                yield self.dataset.finish(encoded, index)

    def _checked(self, segments: List[Segment]) -> Iterator[Segment]:
        """The segments, each once the dataset has looked for shard files changed under it (a run of
        one shard is read like a batch: read/watch.py)."""
        for segment in segments:
            self.dataset.shard_cache.check_files()
            yield segment

    def _shuffled(self, segments: List[Segment], rng: np.random.Generator) -> Iterator[Tuple[int, Any]]:
        """(index, stored record) read shard by shard, through the shuffle buffer."""
        records = ((index, self.dataset.read_encoded(index)) for a, b in self._checked(segments)
                   for index in range(a, b))
        if not self.shuffle or self.shuffle_buffer == 1:
            yield from records
            return
        buffer: List[Tuple[int, Any]] = []
        for record in records:
            if len(buffer) < self.shuffle_buffer:
                buffer.append(record)
                continue
            pick = int(rng.integers(len(buffer)))
            buffer[pick], record = record, buffer[pick]
            yield record
        for pick in rng.permutation(len(buffer)):
            yield buffer[int(pick)]


def _length(segments: List[Segment]) -> int:
    return sum(b - a for a, b in segments)


def _cut(segments: List[Segment], first: int, stop: int) -> List[Segment]:
    """The runs covering positions [first, stop) of the concatenated segments."""
    out: List[Segment] = []
    position = 0
    for a, b in segments:
        lo, hi = max(first, position), min(stop, position + b - a)
        if lo < hi:
            out.append((a + lo - position, a + hi - position))
        position += b - a
    return out


def _consumed(counts: List[int], batch_size: int, batches: int) -> Tuple[List[int], int]:
    """Samples each worker had given after `batches` batches, and the worker whose turn is next:
    DataLoader takes one batch from each worker in turn, skipping workers that have none left."""
    left = [math.ceil(count / batch_size) for count in counts]
    taken = [0] * len(counts)
    turn = 0
    while batches > 0 and any(left):
        if left[turn]:
            left[turn] -= 1
            taken[turn] += 1
            batches -= 1
        turn = (turn + 1) % len(counts)
    return [min(count, take * batch_size) for count, take in zip(counts, taken)], turn


__all__ = ["ShardStream"]
