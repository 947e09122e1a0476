"""HDF5 shards: payloads packed in one chunked dataset, with offsets, labels and CRC32s.

Layout (formats/hdf5.md is the byte-level contract):
  /data     bytes layout: 1-D uint8, all payloads back to back; array layout: (N, *shape)
  /offsets  int64 (N+1,), sample i is data[offsets[i]:offsets[i+1]] (bytes layout only)
  /labels   int64 (N,), -1 when unlabeled
  /crc32    uint32 (N,)
  /keys, /key_blocks  the sample keys (formats/keys.md), version 2 on
  attrs     shardkit_format="hdf5", format_version, layout, num_samples, dataset_id (version 2 on)
"""
from __future__ import annotations
import os
from typing import Any, Dict, Optional, Tuple

import h5py
import numpy as np

from ..errors import UsageError
from ..integrity import fd_path
from ..schema import COMPRESSIONS, SampleSchema
from .base import FormatOptions, ReadaheadOptions, ShardFormat, ShardReader, ShardWriter, readahead_by_size
from .hdf5_layout import FORMAT_NAME, FORMAT_VERSION
from .hdf5_locator import describes, disagreement, locate, parse, read_head
from .hdf5_reader import HDF5Reader, located, short_error
from .locating import FileRows, Location, opened
from .packing import array_dtype
from .hdf5_writer import HDF5Writer


class HDF5Format(ShardFormat):
    """One .h5 file per shard, readable with h5py alone."""

    reader_options = ReadaheadOptions
    name = FORMAT_NAME
    version = FORMAT_VERSION
    keys_since = 2
    extension = ".h5"
    fixed_bytes = 16 << 10      # superblock, object headers, attributes, small tables (measured ~12 KiB)

    def check(self, schema: SampleSchema) -> None:
        if schema.compression not in COMPRESSIONS:
            raise UsageError(f"hdf5 does not support compression {schema.compression!r}")

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        """Readahead of the mmap'd data on while the dataset fits comfortably in RAM, off beyond."""
        return readahead_by_size(total_bytes)

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Payload + label (8) + CRC32 (4) + offset (8, bytes layout) + chunk-index nodes (one of
        about 2 KiB per 64 chunks; chunks are at least 64 KiB)."""
        tables = 12 if schema.is_array else 20
        payload = np.asarray(payload_bytes, dtype=np.int64)
        return payload + payload // 1024 + tables

    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        return HDF5Writer(path, schema, dataset_id)

    def open_reader(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> ShardReader:
        readahead = options.readahead if isinstance(options, ReadaheadOptions) else True
        return HDF5Reader(path, schema, readahead=readahead, fd=fd)

    def peek(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
             fd: Optional[int] = None) -> Tuple[int, Optional[str]]:
        """From the locator (one pread, checked) when the shard has one that still describes the
        file (its metadata CRC32, as a reader checks it); else by opening it with every structure
        check, so a shard edited with HDF5 tools after it was written is looked at in full."""
        with opened(path, fd) as descriptor:
            locator = located(descriptor, path)
        if locator is None:
            return super().peek(path, schema, options, fd)
        return locator.count, locator.dataset_id

    def locate(self, fd: int, size: int, path: str, schema: SampleSchema,
               options: Optional[FormatOptions] = None) -> Optional[Location]:
        """From the locator in the userblock, once it still describes the file (as a reader
        checks it), when it maps uncompressed rows of the schema's size lying back to back in one
        run of chunks."""
        if not schema.is_array or schema.compression != "none":
            return None
        locator = located(fd, path, size)
        if locator is None or locator.row_bytes != schema.sample_nbytes or not len(locator.chunks) or \
                (len(locator.chunks) > 1 and (np.diff(locator.chunks) != locator.chunk_bytes).any()):
            return None
        readahead = options.readahead if isinstance(options, ReadaheadOptions) else True
        rows = FileRows(array_dtype(schema), tuple(schema.shape), locator.count, int(locator.chunks[0]), readahead)
        return Location(locator.count, locator.dataset_id, rows, locator.tables["labels"], locator.tables["crc32"],
                        view=locator.view)

    def cross_check(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> Optional[str]:
        """Open the shard through h5py with every structure check, and compare its locator (when it
        has one that describes the file) with the one HDF5's view of the file gives; all through fd."""
        HDF5Reader(path, schema, located=False, fd=fd).close()
        with opened(path, fd) as descriptor:
            raw = read_head(descriptor, path)
            size = os.fstat(descriptor).st_size
            data = os.pread(descriptor, size, 0) if raw is not None else b""
            if raw is None:
                return None
            recorded = parse(raw, path, size)
            if not describes(recorded, memoryview(data), size):
                return None         # changed after it was written: readers ignore it and use h5py
            with h5py.File(fd_path(descriptor, path), "r", locking=False) as shard:
                try:
                    actual = locate(shard, recorded.mapped, _attr_text(shard.attrs.get("dataset_id")),
                                    recorded.userblock)
                except (ValueError, KeyError, TypeError) as exc:
                    return f"locator describes data HDF5 does not hold ({short_error(exc)})"
        problem = disagreement(recorded, actual)
        return None if problem is None else f"locator disagrees with the HDF5 structure: {problem}"


def _attr_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


FORMAT = HDF5Format()
