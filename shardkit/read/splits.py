"""Datasets made of shardkit datasets: which shard each index lives in, and deterministic splits."""
from __future__ import annotations

from typing import Any, List, Sequence, Union

import numpy as np
import torch.utils.data

from ..errors import UsageError
from ..order import seeded_permutation


def shard_ids(dataset: Any) -> np.ndarray:
    """For each index of dataset, a number naming the file it is read from: shard numbers of a
    shardkit dataset, followed through Subset and ConcatDataset (members numbered apart); any other
    dataset counts as one file per sample."""
    if hasattr(dataset, "shard_starts"):
        starts = np.asarray(dataset.shard_starts, dtype=np.int64)
        return np.repeat(np.arange(len(starts) - 1, dtype=np.int64), np.diff(starts))
    if isinstance(dataset, torch.utils.data.Subset):
        return shard_ids(dataset.dataset)[np.asarray(dataset.indices, dtype=np.int64)]
    if isinstance(dataset, torch.utils.data.ConcatDataset):
        parts, offset = [], 0
        for member in dataset.datasets:
            ids = shard_ids(member)
            parts.append(ids + offset)
            offset += int(ids.max()) + 1 if len(ids) else 0
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    return np.arange(len(dataset), dtype=np.int64)


def random_split(dataset: Any, lengths: Sequence[Union[int, float]], seed: int = 0) -> List[torch.utils.data.Subset]:
    """Split dataset into Subsets of the given lengths (or fractions summing to 1), the same for
    a seed on every machine; each Subset lists its indices in storage order (reads stay local,
    a sampler shuffles them)."""
    total = len(dataset)
    counts = _counts(lengths, total)
    order = seeded_permutation(total, (int(seed), 0x5EED))
    subsets, start = [], 0
    for count in counts:
        subsets.append(torch.utils.data.Subset(dataset, np.sort(order[start:start + count]).tolist()))
        start += count
    return subsets


def train_val_split(dataset: Any, val_fraction: float = 0.1, seed: int = 0) -> List[torch.utils.data.Subset]:
    """[train, validation] Subsets with a val_fraction share (rounded down) of the samples in validation."""
    if not 0 <= val_fraction <= 1:
        raise UsageError(f"val_fraction must be between 0 and 1, not {val_fraction}")
    val = int(len(dataset) * val_fraction)
    return random_split(dataset, [len(dataset) - val, val], seed=seed)


def _counts(lengths: Sequence[Union[int, float]], total: int) -> List[int]:
    """Lengths as counts: integers summing to total, or fractions summing to 1 (floors, the
    remainder handed out one by one from the first split, as torch.utils.data.random_split does)."""
    if all(isinstance(length, (int, np.integer)) for length in lengths):
        if sum(lengths) != total or any(length < 0 for length in lengths):
            raise UsageError(f"split lengths {list(lengths)} must be 0 or more and sum to the {total} samples")
        return [int(length) for length in lengths]
    if any(not 0 <= length <= 1 for length in lengths) or not np.isclose(sum(lengths), 1.0):
        raise UsageError(f"split fractions {list(lengths)} must be between 0 and 1 and sum to 1")
    counts = [int(np.floor(total * fraction)) for fraction in lengths]
    for position in range(total - sum(counts)):
        counts[position % len(counts)] += 1
    return counts
