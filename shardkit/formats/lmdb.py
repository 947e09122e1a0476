"""LMDB shards: one environment file per shard (subdir=False), one record per sample, or one
block of rows per value for uncompressed fixed-shape samples (version 2 on).

Layout (formats/lmdb.md is the byte-level contract):
  8-byte big-endian index -> a record: 32-byte header + payload (zlib stream when flagged), or
                             a block: rows_per_block rows' bytes back to back, no header
  b"__crc32__"            -> uint32 CRC32 of every sample (blocks only)
  b"__key_blocks__", b"__keys__" -> the sample keys (formats/keys.md)
  b"__labels__"           -> int64 little-endian label of every sample, in index order
  b"__meta__"             -> UTF-8 JSON: shardkit_format, format_version, layout, dtype, shape,
                             compression, num_samples, rows_per_block, dataset_id
Keys sort in sample order, so the writer appends; no pickle anywhere.

py-lmdb allows one environment per file and process, so readers of the same file share one
read-only environment through the process's registry (openfiles.py, reference counted); an
environment inherited over fork is closed in the child before the child opens its own
(read-only and lock-free, that touches only the child).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..schema import SampleSchema
from .base import FormatOptions, ReadaheadOptions, ShardFormat, ShardReader, ShardWriter, readahead_by_size
from .lmdb_layout import FORMAT_NAME, FORMAT_VERSION, rows_per_block
from .lmdb_reader import LMDBReader, peek
from .lmdb_writer import LMDBWriter
from .packing import check_per_sample_compression


class LMDBFormat(ShardFormat):
    """One .lmdb environment file per shard, readable with the lmdb package alone."""

    reader_options = ReadaheadOptions
    name = FORMAT_NAME
    version = FORMAT_VERSION
    keys_since = 2
    extension = ".lmdb"
    crafted_files_crash = True     # LMDB trusts its page and node sizes (docs/reliability.md)
    fixed_bytes = 32 << 10      # meta and root pages, reserved values (measured ~20 KiB)

    def check(self, schema: SampleSchema) -> None:
        check_per_sample_compression(self.name, schema)

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        return readahead_by_size(total_bytes)

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Rows in blocks: the row, label (8) and CRC32 (4), plus one page of padding per block of at
        most 16 pages. Records: header (32) and label (8), and either whole 4 KiB overflow pages
        (values over about 2 KiB) or a leaf node (18) on pages filled at least 15/16."""
        payload = np.asarray(payload_bytes, dtype=np.int64)
        if rows_per_block(schema):
            return payload + payload // 256 + 12 + 4112 // rows_per_block(schema)
        value = payload + 32
        overflow = -(-(value + 16) // 4096) * 4096 + 64
        return np.where(value > 2000, overflow, (value + 18) * 16 // 15 + 1) + 8

    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        return LMDBWriter(path, schema, dataset_id)

    def open_reader(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> ShardReader:
        readahead = options.readahead if isinstance(options, ReadaheadOptions) else True
        return LMDBReader(path, schema, readahead, fd)

    def peek(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
             fd: Optional[int] = None) -> Tuple[int, Optional[str]]:
        """From the shard's metadata record (the reader's truncation and metadata checks, not its
        table and key checks, which verify runs short of --quick)."""
        return peek(path, schema, fd)


FORMAT = LMDBFormat()
