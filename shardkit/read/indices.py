"""The index rules of the read side: what ds[i] and a batch accept, as Python's sequences do."""
from __future__ import annotations

import operator
from typing import Any, Sequence

import numpy as np
import torch


def sample_index(index: Any, length: int) -> int:
    """index as a Python int in [0, length): ints, numpy integers and 0-d integer tensors, negative
    ones counted from the end as Python does; TypeError for any other type (floats, bools, arrays)."""
    kind = str(getattr(index, "dtype", type(index).__name__))
    if getattr(index, "ndim", 0) != 0 or "bool" in kind:
        raise TypeError(f"sample index must be an integer, not {type(index).__name__} {kind}")
    try:
        position = operator.index(index)
    except TypeError:
        raise TypeError(f"sample index must be an integer, not {type(index).__name__}") from None
    if not -length <= position < length:
        raise IndexError(f"index {position} out of range for dataset of {length} samples")
    return position + length if position < 0 else position


def sample_indices(indices: Sequence[Any], length: int) -> np.ndarray:
    """Every index of a batch through sample_index's rules, as an int64 array in [0, length); a
    1-D integer array or tensor is checked at once."""
    batch: Any = indices
    if isinstance(batch, torch.Tensor):
        batch = batch.numpy()
    elif isinstance(batch, list) and all(type(index) is int for index in batch):
        try:
            batch = np.array(batch, dtype=np.int64)         # a sampler's batch: checked at once below
        except OverflowError:
            pass                                            # beyond int64: sample_index says which
    if isinstance(batch, np.ndarray) and batch.ndim == 1 and batch.dtype.kind in "iu":
        wanted = batch.astype(np.int64)
        bad = (wanted < -length) | (wanted >= length)
        if bad.any():
            raise IndexError(f"index {int(wanted[bad][0])} out of range for dataset of {length} samples")
        return np.where(wanted < 0, wanted + length, wanted)
    return np.fromiter((sample_index(index, length) for index in batch), dtype=np.int64)


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a 1-D integer array: np.unique without its first-call import
    of numpy.ma (60-190 ms), which a batch read would otherwise pay in every forked DataLoader
    worker, every epoch."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered
