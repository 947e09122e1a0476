"""A mixed dataset's samples tagged with the number of their source, and their collate.

torch's default collate turns a batch of `(x, y, source)` tuples into `[xs, ys, sources]`, each
tensor in its own storage, and a DataLoader worker sends every storage through its pipe as a file
descriptor of its own (with the default `file_descriptor` sharing strategy: one connection to the
worker per descriptor, a few hundred microseconds of CPU over both processes). A tagged tuple is
collated into the same list, but with integer labels and the sources as the two rows of one
tensor, so a batch's sources cost no descriptor of their own.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch.utils.data._utils.collate import collate, default_collate_fn_map

#: The key added to a dict sample (as_dict datasets): the number of the source it came from.
SOURCE_KEY = "__source__"


class Tagged(tuple):
    """A tuple sample with its source's number last: `(x, y, source)`, or `(x, source)` unlabeled."""

    __slots__ = ()


def tagged(sample: Any, source: int) -> Any:
    """A source's sample with its source number added (see MixedDataset)."""
    if isinstance(sample, tuple):
        return Tagged((*sample, source))
    if isinstance(sample, dict):
        return {**sample, SOURCE_KEY: source}
    return Tagged((sample, source))


def collate_tagged(batch: Sequence[Tagged], *, collate_fn_map: Optional[Dict[Any, Callable]] = None) -> List[Any]:
    """default_collate's list for a batch of tagged tuples; where the field before the sources is
    Python ints (labels), that field and the sources are views of one int64 tensor of two rows."""
    size = len(batch[0])
    if any(len(sample) != size for sample in batch) or any(type(sample[-2]) is not int for sample in batch):
        return collate([tuple(sample) for sample in batch], collate_fn_map=collate_fn_map)    # torch's own path
    fields = list(zip(*batch))
    try:
        both = torch.from_numpy(np.array(fields[-2:], dtype=np.int64))     # a fifth of torch.tensor's time
    except OverflowError:                                                   # beyond int64: torch's own error
        return collate([tuple(sample) for sample in batch], collate_fn_map=collate_fn_map)
    return [collate(field, collate_fn_map=collate_fn_map) for field in fields[:-2]] + [both[0], both[1]]


default_collate_fn_map[Tagged] = collate_tagged     # torch's documented way to extend default_collate
