"""shardkit: raw image and CSV trees -> checksummed HDF5 / LMDB / .pt shards -> torch Datasets.

Heavy libraries (torch, h5py, lmdb, PIL) load only when the names that need them are used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (  # noqa: F401 - re-exported
    ConversionError, CorruptSampleError, CorruptShardError, DestinationExistsError, EmptySourceError,
    ForeignShardError, LockedError, ManifestError, NotADatasetError, SampleError, ShardkitError, SourceError,
    UsageError)

__version__ = "0.1.0"  # the one version source: pyproject.toml reads it

if TYPE_CHECKING:      # type checkers see the real objects; at run time they load on first use
    from .batches import RawBatch, collate_raw  # noqa: F401
    from .conversion import ConvertReport, convert  # noqa: F401
    from .dataset import HDF5Dataset, LMDBDataset, PTDataset, ShardDataset, open_dataset  # noqa: F401
    from .handles import worker_init_fn  # noqa: F401
    from .merging import merge  # noqa: F401
    from .sampler import ShardAwareSampler  # noqa: F401
    from .verification import VerifyReport, verify  # noqa: F401

_LAZY = {
    "ConvertReport": "shardkit.conversion",
    "HDF5Dataset": "shardkit.dataset",
    "LMDBDataset": "shardkit.dataset",
    "PTDataset": "shardkit.dataset",
    "RawBatch": "shardkit.batches",
    "ShardAwareSampler": "shardkit.sampler",
    "ShardDataset": "shardkit.dataset",
    "ShardStream": "shardkit.stream",
    "VerifyReport": "shardkit.verification",
    "collate_raw": "shardkit.batches",
    "convert": "shardkit.conversion",
    "merge": "shardkit.merging",
    "open_dataset": "shardkit.dataset",
    "random_split": "shardkit.splits",
    "train_val_split": "shardkit.splits",
    "verify": "shardkit.verification",
    "worker_init_fn": "shardkit.handles",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'shardkit' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(set(globals()) | set(_LAZY))


__all__ = sorted([
    "ConversionError", "ConvertReport", "CorruptSampleError", "CorruptShardError", "DestinationExistsError",
    "EmptySourceError", "ForeignShardError", "HDF5Dataset", "LMDBDataset", "LockedError", "ManifestError",
    "NotADatasetError",
    "PTDataset", "RawBatch", "SampleError", "ShardAwareSampler", "ShardDataset", "ShardStream", "ShardkitError",
    "SourceError", "UsageError", "VerifyReport", "__version__", "collate_raw", "convert", "merge", "open_dataset",
    "random_split", "train_val_split", "verify", "worker_init_fn",
])
