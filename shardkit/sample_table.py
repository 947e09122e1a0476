"""The sample table: every sample's label and CRC32 in one file of the dataset, DST/sample_table.bin,
in global index order (formats/manifest.md, "Sample table").

A random read over thousands of shards otherwise touches each shard's own small label and CRC
tables, scattered over memory; one shared table per dataset costs the same at any shard count.
convert and merge write it from the shards' own tables (writing/table_writer.py), the manifest
records its size and sha256, a process maps it read-only once (the page cache shares it between
DataLoader workers), and a reader compares it with each shard's own tables when the shard opens,
so a read takes only values equal to what the shard stores.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import re
from typing import Any, Dict, Optional, Tuple

import numpy as np

from .errors import CorruptShardError, ManifestError
from .integrity import open_shard_file, private_copy

#: A shard's own (labels, CRC32s), as ShardReader.tables() gives them (None: it keeps no such tables).
ShardTables = Optional[Tuple[np.ndarray, np.ndarray]]

TABLE_NAME = "sample_table.bin"
#: Every name a sample table may have: TABLE_NAME, or after an append sample_table-<samples>.bin (a new
#: name, so that a reader of the manifest before the append never pairs it with the new table).
TABLE_NAMES = re.compile(r"sample_table(-[1-9][0-9]*)?\.bin\Z")
#: One row per sample, packed: its label and the CRC32 of its stored payload, little-endian.
ROW_DTYPE = np.dtype([("label", "<i8"), ("crc32", "<u4")])
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
#: Rows read and hashed at a time by read_labels (3 MiB).
_BLOCK_ROWS = 1 << 18


def check_entry(entry: Any, num_samples: int, where: str, names: Optional[Tuple[str, ...]] = None) -> Dict[str, Any]:
    """The manifest's sample_table entry, if it names this file (`names`: a field's own table in a
    dataset of fields) with the size of num_samples rows and a sha256; ManifestError otherwise."""
    if not isinstance(entry, dict) or set(entry) != {"path", "size", "sha256"}:
        raise ManifestError("sample_table must be an object of path, size and sha256", path=where)
    allowed = names if names is not None else (TABLE_NAME, table_name(num_samples))
    if entry["path"] not in allowed:
        raise ManifestError(f"sample_table path must be {' or '.join(map(repr, allowed))}, not {entry['path']!r}",
                            path=where)
    if entry["size"] != num_samples * ROW_DTYPE.itemsize or type(entry["size"]) is not int:
        raise ManifestError(f"sample_table size {entry['size']!r} is not {ROW_DTYPE.itemsize} bytes for each "
                            f"of the {num_samples} samples", path=where)
    if not isinstance(entry["sha256"], str) or not _SHA256.match(entry["sha256"]):
        raise ManifestError("sample_table sha256 must be 64 lowercase hex digits", path=where)
    return dict(entry)


def table_name(num_samples: int) -> str:
    """The name of the sample table an append of a dataset to num_samples samples writes."""
    return f"sample_table-{num_samples}.bin"


def open_table_file(root: str, entry: Dict[str, Any], name: Optional[str] = None) -> int:
    """A read-only descriptor of the table, a regular file of the recorded size inside root, named
    name there (a remote dataset's cache names it by its content) or else what the entry names
    (check_entry checked it); CorruptShardError naming it otherwise."""
    return open_shard_file(os.path.join(root, name or entry["path"]), root, entry["size"], "the sample table")


class SampleTable:
    """The table of a dataset mapped in this process: `labels` and `crcs`, one entry per global
    index (views of one read-only map; no descriptor stays open). `hashed`: mapped from a private
    copy whose sha256 matched the manifest's (integrity.private_copy), so later changes to the file
    are never read."""

    def __init__(self, root: str, entry: Dict[str, Any], hashed: bool = False, name: Optional[str] = None) -> None:
        self.path = os.path.join(root, name or entry["path"])
        fd = open_table_file(root, entry, name)
        try:
            if hashed:
                copy = private_copy(fd, self.path, entry["size"], entry["sha256"], entry["path"])
                os.close(fd)
                fd = copy
            self._map = mmap.mmap(fd, entry["size"], access=mmap.ACCESS_READ) if entry["size"] else None
        finally:
            os.close(fd)
        rows = np.frombuffer(self._map, dtype=ROW_DTYPE) if self._map is not None else np.zeros(0, ROW_DTYPE)
        self.labels: np.ndarray = rows["label"]
        self.crcs: np.ndarray = rows["crc32"]

    def check_shard(self, tables: ShardTables, start: int, path: str, shard: int) -> None:
        """CorruptShardError unless a shard's own label and CRC32 tables equal the table's rows
        from `start` on (the shard's count was checked against the manifest already)."""
        problem = shard_mismatch(tables, self.labels, self.crcs, start)
        if problem:
            raise CorruptShardError(f"{problem} ({self.path}); run shardkit verify", path=path, shard=shard)


def shard_mismatch(tables: ShardTables, labels: np.ndarray, crcs: np.ndarray, start: int) -> Optional[str]:
    """What differs between a shard's own tables and the sample table's rows for it (None: nothing)."""
    if tables is None:
        return "stores no label and CRC32 tables to compare with the dataset's sample table"
    own_labels, own_crcs = tables
    stop = start + len(own_labels)
    # compared as little-endian bytes: several times faster than np.array_equal on a shard's rows
    if np.asarray(own_labels, "<i8").tobytes() != labels[start:stop].tobytes():
        return "its labels differ from the dataset's sample table"
    if np.asarray(own_crcs, "<u4").tobytes() != crcs[start:stop].tobytes():
        return "its CRC32s differ from the dataset's sample table"
    return None


class TableRows:
    """The table open (checked, no map) for verify's reads of a few rows each, one shard's at a
    time: opened once for a batch of shards instead of once per shard. CorruptShardError naming
    the table when it cannot be opened."""

    def __init__(self, root: str, entry: Dict[str, Any]) -> None:
        self.name = entry["path"]
        self._fd = open_table_file(root, entry)

    def read(self, start: int, count: int) -> Tuple[np.ndarray, np.ndarray]:
        """(labels, crcs) of `count` rows from `start`, read with one pread."""
        raw = os.pread(self._fd, count * ROW_DTYPE.itemsize, start * ROW_DTYPE.itemsize)
        rows = np.frombuffer(raw, dtype=ROW_DTYPE, count=len(raw) // ROW_DTYPE.itemsize)
        return rows["label"], rows["crc32"]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def read_labels(root: str, entry: Dict[str, Any], name: Optional[str] = None) -> np.ndarray:
    """Every label, in index order, from the table (root/name), once its sha256 matches the
    manifest's (the whole file is read and hashed, a block at a time): all labels without opening
    a shard; CorruptShardError naming the table when it does not match."""
    return read_rows(root, entry, "label", name)


def read_rows(root: str, entry: Dict[str, Any], field: str, name: Optional[str] = None) -> np.ndarray:
    """One field of every row ("label" int64 or "crc32" uint32), in index order, as read_labels
    reads the labels: only once the whole table's sha256 matches the manifest's."""
    path = os.path.join(root, name or entry["path"])
    fd = open_table_file(root, entry, name)      # first: the file really has the size the manifest claims
    rows = entry["size"] // ROW_DTYPE.itemsize
    values = np.empty(rows, dtype=ROW_DTYPE[field])
    digest = hashlib.sha256()
    try:
        for start in range(0, rows, _BLOCK_ROWS):
            count = min(_BLOCK_ROWS, rows - start)
            data = os.pread(fd, count * ROW_DTYPE.itemsize, start * ROW_DTYPE.itemsize)
            if len(data) != count * ROW_DTYPE.itemsize:
                raise CorruptShardError("changed while it was read", path=path)
            digest.update(data)
            values[start:start + count] = np.frombuffer(data, dtype=ROW_DTYPE)[field]
    finally:
        os.close(fd)
    if digest.hexdigest() != entry["sha256"]:
        raise CorruptShardError("fails its sha256 check (its bytes changed after conversion; run shardkit "
                                "verify)", path=path)
    return values
