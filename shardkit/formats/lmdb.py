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
read-only environment (lmdb_reader.ENVIRONMENTS, reference counted); an
environment inherited over fork is closed in the child before the child opens its own
(read-only and lock-free, that touches only the child).
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

import numpy as np

from ..errors import CorruptShardError
from ..schema import SampleSchema
from .base import FormatOptions, ReadaheadOptions, ShardFormat, ShardReader, ShardWriter, readahead_by_size
from .lmdb_layout import (CRCS_KEY, FORMAT_NAME, FORMAT_VERSION, LABELS_KEY, MAX_META_BYTES, META_KEY, rows_per_block,
                          sample_key)
from .lmdb_pages import find_values
from .lmdb_reader import LMDBReader, parse_meta, peek
from .lmdb_writer import LMDBWriter
from .locating import FileRows, Location, opened
from .packing import array_dtype, check_per_sample_compression


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

    def locate(self, fd: int, size: int, path: str, schema: SampleSchema,
               options: Optional[FormatOptions] = None) -> Optional[Location]:
        """For a shard whose rows fit one block (the many small shards of a large dataset): where
        that block, the label and CRC32 tables lie, found from LMDB's pages without the lmdb
        library (lmdb_pages.py), and the count and identity its metadata record states."""
        if not rows_per_block(schema):
            return None
        found = find_values(fd, size, (META_KEY, sample_key(0), LABELS_KEY, CRCS_KEY))
        if found is None or found[META_KEY][1] > MAX_META_BYTES:
            return None
        meta = parse_meta(os.pread(fd, found[META_KEY][1], found[META_KEY][0]), schema, path)
        count, width = meta["num_samples"], schema.sample_nbytes
        (offset, nbytes), labels, crcs = found[sample_key(0)], found[LABELS_KEY], found[CRCS_KEY]
        if meta["format_version"] < 2 or not 0 < count <= rows_per_block(schema) or nbytes != count * width \
                or labels[1] != 8 * count or crcs[1] != 4 * count:
            return None
        if max(offset + nbytes, labels[0] + labels[1], crcs[0] + crcs[1]) > size:
            raise CorruptShardError("corrupt LMDB shard: a value lies past the end of the file", path=path)
        readahead = options.readahead if isinstance(options, ReadaheadOptions) else True
        rows = FileRows(array_dtype(schema), tuple(schema.shape), count, offset, readahead)
        return Location(count, meta["dataset_id"], rows, labels, crcs)

    def cross_check(self, path: str, schema: SampleSchema, options: Optional[FormatOptions] = None,
                    fd: Optional[int] = None) -> Optional[str]:
        """Where locate finds the rows, labels and CRC32s from LMDB's pages, they must be the bytes
        the lmdb library reads for them (a page structure can be made to say otherwise); all through fd."""
        with opened(path, fd) as descriptor:
            location = self.locate(descriptor, os.fstat(descriptor).st_size, path, schema, options)
            if location is None:
                return None
            reader = LMDBReader(path, schema, True, descriptor)
            try:
                rows = b"".join(np.ascontiguousarray(reader.read(i).payload).tobytes() for i in range(len(reader)))
                tables = reader.tables()
            finally:
                reader.close()
            found = [os.pread(descriptor, size, offset) for offset, size in
                     ((location.rows.offset, len(rows)), location.labels, location.crcs)]
        assert tables is not None
        expected = [rows, np.asarray(tables[0], "<i8").tobytes(), np.asarray(tables[1], "<u4").tobytes()]
        for name, got, want in zip(("rows", "labels", "CRC32s"), found, expected):
            if got != want:
                return f"its pages locate {name} that differ from what the lmdb library reads"
        return None


FORMAT = LMDBFormat()
