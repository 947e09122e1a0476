"""collate_fields: the DataLoader collate_fn for samples of named fields (dicts or tuples).

For each field: numbers become one tensor (int64, or float64 as stored); arrays (numpy or torch,
images decoded as "numpy" or "tensor") of one shape and dtype are stacked; anything else stays a
list of the batch's values (text, JSON, bytes, PIL images, a field absent in some sample). Arrays
of one dtype and number of dimensions but different shapes (a variable-shape field) stay a list
too, or with `pad=value` are padded with that value to the batch's largest shape and stacked:
`DataLoader(ds, collate_fn=functools.partial(shardkit.collate_fields, pad=-1))`.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

import numpy as np
import torch


def collate_fields(batch: Sequence[Any], pad: Optional[float] = None) -> Any:
    """A batch of samples (dicts of fields, tuples, or single values) as one dict, tuple or value."""
    first = batch[0]
    if isinstance(first, Mapping):
        return {name: collate_values([sample[name] for sample in batch], pad) for name in first}
    if isinstance(first, tuple):
        return tuple(collate_values([sample[number] for sample in batch], pad) for number in range(len(first)))
    return collate_values(list(batch), pad)


def collate_values(values: List[Any], pad: Optional[float] = None) -> Any:
    """One field's values across a batch: a tensor where they stack (or pad), else the list."""
    if any(value is None for value in values):
        return values
    kinds = {type(value) for value in values}
    if kinds <= {int}:
        return torch.tensor(values, dtype=torch.int64)
    if kinds <= {int, float}:          # float64, as stored (and as torch's default_collate makes them)
        return torch.tensor(values, dtype=torch.float64)
    if not all(isinstance(value, (np.ndarray, torch.Tensor)) for value in values):
        return values
    arrays = [value if isinstance(value, torch.Tensor) else _tensor(value) for value in values]
    dtypes, shapes = {array.dtype for array in arrays}, {tuple(array.shape) for array in arrays}
    if len(dtypes) != 1:
        return values
    if len(shapes) == 1:
        return torch.stack(arrays)
    if pad is None or len({len(shape) for shape in shapes}) != 1:
        return values
    largest = [max(sizes) for sizes in zip(*shapes)]
    out = torch.full((len(arrays), *largest), pad, dtype=arrays[0].dtype)
    for row, array in zip(out, arrays):
        row[tuple(slice(0, size) for size in array.shape)] = array
    return out


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A numpy array as a tensor: shared when writable, else copied (a read-only view of a shard)."""
    return torch.from_numpy(array if array.flags.writeable else np.array(array))


__all__ = ["collate_fields", "collate_values"]
