"""PyTorch .pt shards: one torch.save archive per shard holding packed tensors and plain metadata.

Layout (formats/pt.md is the byte-level contract), a dict with keys in this order:
  shardkit_format "pt", format_version, layout, dtype, shape, compression, num_samples (plain types)
  data         uint8 (total,)   every stored payload back to back (zlib streams when compressed)
  offsets      int64 (N+1,)     sample i is data[offsets[i]:offsets[i+1]]
  raw_lengths  int64 (N,)       payload length before compression
  labels       int64 (N,)       -1 when unlabeled
  crc32        int64 (N,)       zlib CRC-32 of the uncompressed payload (0 .. 2**32-1)
  dataset_id   str; keys uint8, key_blocks int64: the sample keys (formats/keys.md), version 2 on
Readers use torch.load(path, mmap=True, weights_only=True) (torch >= 2.1): tensors stay in the
file's mapping, so a random read touches only its own pages and memory stays flat with shards.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..schema import SampleSchema
from .base import FormatOptions, ShardFormat, ShardReader, ShardWriter
from .locating import FileRows, Location, opened
from .packing import array_dtype, check_per_sample_compression
from .pt_layout import FORMAT_NAME, FORMAT_VERSION
from .pt_reader import PTReader, field_problem, located


class PTFormat(ShardFormat):
    """One .pt file per shard, readable with torch alone."""

    name = FORMAT_NAME
    version = FORMAT_VERSION
    keys_since = 2
    extension = ".pt"
    # no reader_options: torch.load(mmap=True) has no readahead switch
    fixed_bytes = 8 << 10       # zip entries, their 64-byte alignment, the pickled dict (measured ~3.3 KiB)

    def check(self, schema: SampleSchema) -> None:
        check_per_sample_compression(self.name, schema)

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Payload + offset, raw length, label and CRC32 (8 each)."""
        return np.asarray(payload_bytes, dtype=np.int64) + 32

    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        from .pt_writer import PTWriter
        return PTWriter(path, schema, dataset_id)

    def open_reader(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> ShardReader:
        return PTReader(path, schema, fd=fd)

    def peek(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
             fd: Optional[int] = None) -> Tuple[int, Optional[str]]:
        """From the locator (one pread of the file's tail, checked) when the shard has one that
        still describes the archive (as a reader checks it); else by opening it with torch.load."""
        with opened(path, fd) as descriptor:
            locator = located(descriptor, path)
        if locator is None:
            return super().peek(path, schema, options, fd)
        return locator.count, locator.dataset_id

    def locate(self, fd: int, size: int, path: str, schema: SampleSchema,
               options: Optional[FormatOptions] = None) -> Optional[Location]:
        """From the locator in the archive's comment, once it still describes the archive (as a
        reader checks it), when its data tensor holds exactly the uncompressed rows of the schema."""
        if not schema.is_array or schema.compression != "none":
            return None
        locator = located(fd, path, size)
        if locator is None or field_problem(locator.fields, schema) is not None:
            return None
        offset, nbytes = locator.tables["data"]
        if nbytes != locator.count * schema.sample_nbytes:
            return None
        rows = FileRows(array_dtype(schema), tuple(schema.shape), locator.count, offset)
        return Location(locator.count, locator.dataset_id, rows, locator.tables["labels"], locator.tables["crc32"],
                        "<i8", locator.view)

    def cross_check(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> Optional[str]:
        """Open the shard through torch.load with every check, and compare each tensor and field
        with what the locator maps (when it has one that describes the file); both through fd."""
        slow = PTReader(path, schema, located=False, fd=fd)
        fast = PTReader(path, schema, fd=fd)
        try:
            if fast._map is None:
                return None
            for name in ("_data", "_offsets", "_raw_lengths", "_labels", "_crcs"):
                if not np.array_equal(getattr(fast, name), getattr(slow, name)):
                    return f"locator disagrees with the archive: {name.lstrip('_')} differs from torch.load's"
            if (len(fast), fast.dataset_id) != (len(slow), slow.dataset_id) or \
                    [fast.key(i) for i in range(len(fast))] != [slow.key(i) for i in range(len(slow))]:
                return "locator disagrees with the archive: count, dataset_id or keys differ from torch.load's"
            return None
        finally:
            fast.close()
            slow.close()


FORMAT = PTFormat()
