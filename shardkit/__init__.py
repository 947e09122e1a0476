"""shardkit: raw image and CSV trees -> checksummed HDF5 / LMDB / .pt shards -> torch Datasets.

Heavy libraries (torch, h5py, lmdb, PIL) load only when the names that need them are used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (  # noqa: F401 - re-exported
    ConversionError, CorruptSampleError, CorruptShardError, DestinationExistsError, EmptySourceError,
    ForeignShardError, LockedError, ManifestError, NotADatasetError, OutOfFilesError, RemoteError, SampleError,
    ShardkitError, SourceError, UnguardedMainError, UsageError)

__version__ = "0.1.0"  # the one version source: pyproject.toml reads it

if TYPE_CHECKING:      # type checkers see the real objects; at run time they load on first use
    from .read.batches import RawBatch, collate_raw  # noqa: F401
    from .writing.conversion import ConvertReport, convert  # noqa: F401
    from .read.dataset import HDF5Dataset, LMDBDataset, PTDataset, ShardDataset, open_dataset  # noqa: F401
    from .read.cache import worker_init_fn  # noqa: F401
    from .ops.duplicates import DuplicatesReport, duplicates  # noqa: F401
    from .ops.merging import merge  # noqa: F401
    from .ops.pull import PullReport, pull  # noqa: F401
    from .ops.push import PushReport, push  # noqa: F401
    from .read.mixing import MixedDataset  # noqa: F401
    from .read.sampler import ShardAwareSampler  # noqa: F401
    from .writing.repair_run import RepairReport, repair  # noqa: F401
    from .ops.verification import VerifyReport, verify  # noqa: F401
    from .read.fields_dataset import FieldsDataset  # noqa: F401
    from .read.field_collate import collate_fields  # noqa: F401
    from .schema import FieldSpec  # noqa: F401
    from .writing.writer import Writer, write  # noqa: F401

_LAZY = {
    "ConvertReport": "shardkit.writing.conversion",
    "DuplicatesReport": "shardkit.ops.duplicates",
    "FieldSpec": "shardkit.schema",
    "FieldsDataset": "shardkit.read.fields_dataset",
    "HDF5Dataset": "shardkit.read.dataset",
    "LMDBDataset": "shardkit.read.dataset",
    "MixedDataset": "shardkit.read.mixing",
    "PTDataset": "shardkit.read.dataset",
    "PullReport": "shardkit.ops.pull",
    "PushReport": "shardkit.ops.push",
    "RawBatch": "shardkit.read.batches",
    "RepairReport": "shardkit.writing.repair_run",
    "ShardAwareSampler": "shardkit.read.sampler",
    "ShardDataset": "shardkit.read.dataset",
    "ShardStream": "shardkit.read.stream",
    "VerifyReport": "shardkit.ops.verification",
    "collate_fields": "shardkit.read.field_collate",
    "collate_raw": "shardkit.read.batches",
    "convert": "shardkit.writing.conversion",
    "duplicates": "shardkit.ops.duplicates",
    "merge": "shardkit.ops.merging",
    "open_dataset": "shardkit.read.dataset",
    "pull": "shardkit.ops.pull",
    "push": "shardkit.ops.push",
    "random_split": "shardkit.read.splits",
    "repair": "shardkit.writing.repair_run",
    "train_val_split": "shardkit.read.splits",
    "verify": "shardkit.ops.verification",
    "worker_init_fn": "shardkit.read.cache",
    "Writer": "shardkit.writing.writer",
    "write": "shardkit.writing.writer",
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
    "DuplicatesReport", "EmptySourceError", "FieldSpec", "FieldsDataset", "ForeignShardError", "HDF5Dataset",
    "LMDBDataset", "LockedError", "ManifestError", "MixedDataset", "NotADatasetError", "OutOfFilesError",
    "PTDataset", "PullReport", "PushReport", "RawBatch", "RemoteError", "RepairReport", "SampleError",
    "ShardAwareSampler", "ShardDataset", "ShardStream", "ShardkitError", "SourceError", "UnguardedMainError",
    "UsageError", "VerifyReport", "Writer", "__version__", "collate_fields", "collate_raw", "convert",
    "duplicates", "merge", "open_dataset", "pull", "push", "random_split", "repair", "train_val_split", "verify",
    "worker_init_fn", "write",
])
