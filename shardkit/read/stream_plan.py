"""ShardStream's plan: which samples each rank and DataLoader worker reads, in which order, and
what an epoch has left after a restart on another number of ranks or workers.

A reader (one worker of one rank) gets a contiguous part of its rank's block (read/epochs.py) and
yields it through a shuffle buffer; `buffer_order` gives that order as positions of the part, so
it can be recomputed without reading a sample. The samples a reader had given after the loop took
B batches follow from DataLoader's rule (one batch from each worker in turn, skipping workers that
have ended): the first `consumed` positions of its buffer order.
"""
from __future__ import annotations

import itertools
import math
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import UsageError
from .epochs import padded_positions, per_rank

#: (ranks, workers, batches taken, batch size, drop_last) of one stretch of an epoch between restarts.
StreamLayer = Tuple[int, int, int, int, bool]


def part_bounds(size: int, part: int, parts: int) -> Tuple[int, int]:
    """[start, stop) of part `part` of `parts` contiguous parts of a block of `size`."""
    return size * part // parts, size * (part + 1) // parts


def buffer_order(count: int, buffer: int, rng: Optional[np.random.Generator]) -> Iterator[int]:
    """Positions 0..count-1 in the order a shuffle buffer of `buffer` samples yields them, reading
    them in order (rng None: in order): fill the buffer, then for each next sample give out a
    random one of the buffer and put the new one in its place; at the end, the rest shuffled."""
    if rng is None or buffer == 1:
        yield from range(count)
        return
    held = list(range(min(buffer, count)))
    for position in range(len(held), count):
        pick = int(rng.integers(len(held)))
        out, held[pick] = held[pick], position
        yield out
    for pick in rng.permutation(len(held)):
        yield held[int(pick)]


def consumed_counts(counts: Sequence[int], batch_size: int, batches: int) -> Tuple[List[int], int]:
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


def reader_rng(seed: int, epoch: int, rank: int, part: int, layer: int) -> np.random.Generator:
    """The shuffle buffer's generator of one reader: (seed, epoch, rank, part), and the layer
    number after a restart on another number of ranks or workers."""
    return np.random.default_rng([seed, epoch, rank, part] + ([layer] if layer else []))


def layer_left(order: np.ndarray, layer: StreamLayer, number: int, seed: int, epoch: int,
               buffer: Optional[int]) -> np.ndarray:
    """The entries of order no reader of `layer` had given (epoch order kept): each rank's block,
    each worker's part of it, the first samples of its buffer order that the batches consumed."""
    ranks, workers, batches, batch_size, drop_last = layer
    size = per_rank(len(order), ranks, drop_last)
    if not batches or not len(order):
        return order
    positions = padded_positions(len(order), ranks, drop_last).reshape(ranks, size)
    keep = np.ones(len(order), dtype=bool)
    counts = [part_bounds(size, part, workers)[1] - part_bounds(size, part, workers)[0] for part in range(workers)]
    consumed, _ = consumed_counts(counts, batch_size, batches)
    for rank in range(ranks):
        for part in range(workers):
            start, _ = part_bounds(size, part, workers)
            rng = reader_rng(seed, epoch, rank, part, number) if buffer is not None else None
            given = np.fromiter(itertools.islice(buffer_order(counts[part], buffer or 1, rng), consumed[part]),
                                dtype=np.int64, count=consumed[part])
            keep[positions[rank, start + given]] = False
    return order[keep]


def checked_stream_layers(raw: object) -> List[StreamLayer]:
    """The restart records of a saved stream state, each checked; UsageError for anything else."""
    layers: List[StreamLayer] = []
    for item in raw or []:      # type: ignore[attr-defined]
        if not (isinstance(item, (list, tuple)) and len(item) == 5 and all(isinstance(v, int) for v in item[:4])
                and item[0] >= 1 and item[1] >= 1 and item[2] >= 0 and item[3] >= 1):
            raise UsageError(f"stream state has a malformed resume record {item!r}")
        layers.append((int(item[0]), int(item[1]), int(item[2]), int(item[3]), bool(item[4])))
    return layers
