"""The contract every storage format implements: a format object, a writer and a reader.

A format lays out bytes only. It never renames, hashes, touches the manifest or decodes
images; the sink and the read side do that once for all formats.
"""
from __future__ import annotations

import abc
import os
from typing import Any, Dict, Iterator, List, Sequence

import numpy as np

from ..records import Encoded
from ..schema import SampleSchema


#: Datasets up to this fraction of physical memory default to OS readahead on (docs/formats.md).
READAHEAD_RAM_FRACTION = 0.5


def physical_memory() -> int:
    """Bytes of RAM of this machine (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 0


def readahead_by_size(total_bytes: int) -> Dict[str, Any]:
    """Readahead on while a dataset fits comfortably in RAM (cold epochs stream), off beyond it
    (nearly every random read misses the cache; readahead would read megabytes per sample)."""
    ram = physical_memory()
    return {"readahead": bool(ram == 0 or total_bytes <= READAHEAD_RAM_FRACTION * ram)}


class ShardWriter(abc.ABC):
    """Writes one shard file at the path it was given; close() flushes and fsyncs it."""

    @abc.abstractmethod
    def append(self, sample: Encoded) -> None:
        """Add the next sample (local index = number of samples appended before it)."""

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """Add consecutive samples; the same as append() on each (a format may do it faster,
        but must store exactly the same bytes)."""
        for sample in samples:
            self.append(sample)

    @abc.abstractmethod
    def close(self) -> None:
        """Finish the file: write indexes and metadata, flush, fsync."""

    def abort(self) -> None:
        """Release resources after a failure; the caller deletes the file."""
        try:
            self.close()
        except Exception:  # noqa: BLE001 - aborting must not mask the original error
            pass


class ShardReader(abc.ABC):
    """Random access to one shard's samples; raises CorruptShardError on a bad structure."""

    @abc.abstractmethod
    def __len__(self) -> int:
        """Number of samples in the shard."""

    @abc.abstractmethod
    def read(self, index: int) -> Encoded:
        """Sample at local index: payload as stored, label, stored CRC32."""

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Samples at local indices, in that order, in one pass (a format may do it faster than
        read() on each, with the same checks and the same results)."""
        return [self.read(index) for index in indices]

    @abc.abstractmethod
    def labels(self) -> np.ndarray:
        """All labels of the shard as an int64 array (NO_LABEL when unlabeled)."""

    def __iter__(self) -> Iterator[Encoded]:
        for index in range(len(self)):
            yield self.read(index)

    def close(self) -> None:
        """Release file handles."""


class ShardFormat(abc.ABC):
    """A storage format: its name, on-disk version, file extension and factories."""

    name: str = ""
    version: int = 1
    extension: str = ""

    def check(self, schema: SampleSchema) -> None:
        """Raise UsageError if this format cannot store samples of this schema."""

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        """Reader/writer options recorded in the manifest (e.g. LMDB readahead)."""
        return {}

    @abc.abstractmethod
    def open_writer(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardWriter:
        """A writer for a new shard file at path."""

    @abc.abstractmethod
    def open_reader(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardReader:
        """A reader for an existing shard file at path."""
