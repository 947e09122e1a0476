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

Mid-epoch resume: state_dict(batches_seen, num_workers) after the training loop took that many
batches of DataLoader(stream, batch_size=stream.batch_size, num_workers=W) in this epoch; a new
stream given load_state_dict(state) yields exactly the batches that were still to come. DataLoader
takes one batch from each worker in turn (skipping workers that have ended); that rule tells each
worker how many of its samples were already consumed, and a new DataLoader's worker 0 takes the
part of the worker whose turn was next. Loaded on another number of ranks or workers (or with
another batch size), the stream reads what the epoch has left instead: the order without every
sample the old readers had given (read/stream_plan.py), cut again into blocks and parts.

A dataset at a URL: as a reader starts a shard, it asks the dataset's cache to prefetch the next
PREFETCH_AHEAD shards of its part.
"""
from __future__ import annotations

import itertools
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
import torch.utils.data

from .dataset import open_dataset
from ..errors import UsageError
from .epochs import per_rank, rank_block, replica_and_rank
from .stream_plan import (StreamLayer, buffer_order, checked_stream_layers, consumed_counts, layer_left,
                          part_bounds, reader_rng)

#: Shards of its part after the one it reads that a reader asks a remote dataset to prefetch.
PREFETCH_AHEAD = 2


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
        self._layers: List[StreamLayer] = []      # restarts of this epoch on other ranks or workers
        #: the loaded position: (ranks, workers or None, batches, batch size, drop_last)
        self._current: Optional[Tuple[Any, ...]] = None
        self.num_samples = per_rank(len(self.dataset), num_replicas, drop_last)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration yields (also ends a pending resume)."""
        if int(epoch) != self.epoch:
            self._layers, self._current = [], None
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self.num_samples

    def state_dict(self, batches_seen: int, num_workers: Optional[int] = None) -> Dict[str, Any]:
        """Where this rank stands after the loop took `batches_seen` batches of this epoch from this
        stream (since it was loaded, when it was). num_workers: the DataLoader's, needed to resume
        on another number of ranks or workers (on the same ones it may be left out)."""
        layers, current = list(self._layers), self._current
        if num_workers is not None:
            num_workers = max(1, int(num_workers))      # 0 workers: the loop reads as one worker does
        here = (self.num_replicas, num_workers, int(batches_seen), self.batch_size, self.drop_last)
        if current is not None and _same_layer(current, here):
            here = (*current[:2], current[2] + int(batches_seen), *current[3:])
            if here[1] is None:
                here = (here[0], num_workers, *here[2:])
        elif current is not None:
            layers.append(_finished(current))
        return {**self._identity(), "epoch": self.epoch, "num_replicas": here[0], "num_workers": here[1],
                "batches_seen": here[2], "batch_size": here[3], "drop_last": here[4], "rank": self.rank,
                "resumed": [list(layer) for layer in layers]}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continue the epoch of `state` after its batches_seen batches (on the same or another
        number of ranks, workers or batch size)."""
        identity = self._identity()
        found = {key: state.get(key, identity[key] if key in ("shuffle", "shuffle_buffer", "total") else None)
                 for key in identity}
        if found != identity:
            raise UsageError(f"stream state is for {found}, this stream has {identity}; resume with the same "
                             "dataset, seed and shuffle options")
        layers = checked_stream_layers(state.get("resumed"))
        current = (state.get("num_replicas"), state.get("num_workers"), state.get("batches_seen"),
                   state.get("batch_size"), bool(state.get("drop_last", self.drop_last)))
        if not all(isinstance(value, int) and value >= (0 if field == 2 else 1)
                   for field, value in enumerate(current[:4]) if not (field == 1 and value is None)):
            raise UsageError(f"stream state has a malformed position {current!r}")
        self.epoch = int(state["epoch"])
        self._layers, self._current = layers, current     # type: ignore[assignment]

    def _identity(self) -> Dict[str, Any]:
        return {"seed": self.seed, "shuffle": self.shuffle, "shuffle_buffer": self.shuffle_buffer,
                "total": len(self.dataset)}

    # ---- the plan ----------------------------------------------------------------------
    def epoch_order(self) -> np.ndarray:
        """Every global index of the epoch, shard by shard in the epoch's shard order."""
        starts = np.asarray(self.dataset.shard_starts, dtype=np.int64)
        shards = np.arange(len(starts) - 1)
        if self.shuffle:
            shards = np.random.default_rng([self.seed, self.epoch]).permutation(shards)
        counts = starts[shards + 1] - starts[shards]
        firsts = np.repeat(starts[shards] - (np.cumsum(counts) - counts), counts)
        return firsts + np.arange(int(counts.sum()), dtype=np.int64)

    def _plan(self, workers: int) -> Tuple[List[StreamLayer], int]:
        """The finished layers of this epoch and the batches already taken in the current one."""
        current = self._current
        if current is None:
            return list(self._layers), 0
        if _same_layer(current, (self.num_replicas, workers, 0, self.batch_size, self.drop_last)):
            return list(self._layers), int(current[2])
        return [*self._layers, _finished(current)], 0

    def worker_part(self, worker: int, workers: int) -> Tuple[np.ndarray, int, int, int]:
        """(the global indices of one reader's part, its number, the samples of it already
        consumed, the layer) for DataLoader worker `worker` of `workers` on this rank."""
        layers, batches = self._plan(workers)
        order = self.epoch_order()
        buffer = self.shuffle_buffer if self.shuffle else None
        for number, layer in enumerate(layers):
            order = layer_left(order, layer, number, self.seed, self.epoch, buffer)
        block = rank_block(order, self.num_replicas, self.rank, self.drop_last)
        counts = [stop - start for start, stop in (part_bounds(len(block), w, workers) for w in range(workers))]
        consumed, first = consumed_counts(counts, self.batch_size, batches)
        # a new DataLoader asks worker 0 first: it plays the part whose turn was next
        part = (worker + first) % workers
        start, stop = part_bounds(len(block), part, workers)
        return block[start:stop], part, consumed[part], len(layers)

    # ---- reading -----------------------------------------------------------------------
    def reader_order(self, worker: int, workers: int) -> Tuple[np.ndarray, Iterator[int], np.ndarray]:
        """For DataLoader worker `worker` of `workers`: the global indices of its part, the positions
        of that part it yields from now on (lazily, in order), and which positions it skips (those
        consumed before a resume). Nothing is read."""
        indices, part, skip, layer = self.worker_part(worker, workers)
        rng = reader_rng(self.seed, self.epoch, self.rank, part, layer) if self.shuffle else None
        order = buffer_order(len(indices), self.shuffle_buffer, rng)
        skipped = np.zeros(len(indices), dtype=bool)
        skipped[np.fromiter(itertools.islice(order, skip), dtype=np.int64, count=skip)] = True
        return indices, order, skipped

    def __iter__(self) -> Iterator[Any]:
        info = torch.utils.data.get_worker_info()
        indices, order, skipped = self.reader_order(*((0, 1) if info is None else (info.id, info.num_workers)))
        shards = np.searchsorted(self.dataset.shard_starts, indices, side="right") - 1
        runs = shards[np.flatnonzero(np.diff(shards, prepend=-1))].tolist()     # the part's shards in order
        held: Dict[int, Any] = {}
        reading, shard, run, checked = 0, -1, -1, -1
        for position in order:              # read in stored order, each sample still to give once
            while reading <= position:
                if shards[reading] != shard:        # the part's next shard: prefetch the ones after it
                    shard, run = shards[reading], run + 1
                    self.dataset.prefetch(runs[run + 1:run + 1 + PREFETCH_AHEAD])
                if not skipped[reading]:
                    if shard != checked:    # a run of one shard is read like a batch: read/watch.py
                        checked = shard
                        self.dataset.shard_cache.check_files()
                    held[reading] = self.dataset.read_encoded(int(indices[reading]))
                reading += 1
            yield self.dataset.finish(held.pop(position), int(indices[position]))


def _same_layer(saved: Tuple[Any, ...], here: Tuple[Any, ...]) -> bool:
    """Whether a saved position continues on `here`'s ranks, workers (None: unknown, taken as the
    same), batch size and drop_last."""
    workers_match = saved[1] is None or here[1] is None or saved[1] == here[1]
    return saved[0] == here[0] and workers_match and tuple(saved[3:]) == tuple(here[3:])


def _finished(current: Tuple[Any, ...]) -> StreamLayer:
    """A saved position as the record of a finished layer; it needs the number of workers."""
    if current[1] is None:
        raise UsageError("this stream state was saved without num_workers; pass state_dict(batches_seen, "
                         "num_workers=W) to resume on another number of ranks, workers or batch size")
    return (int(current[0]), int(current[1]), int(current[2]), int(current[3]), bool(current[4]))


__all__ = ["ShardStream"]
