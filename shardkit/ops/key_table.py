"""KeyTable: (128-bit key, reference) rows in bounded memory, and the references of every key seen
more than once (duplicates' candidates and groups).

Rows are packed numpy records (24 bytes). Up to `memory_rows` stay in memory; past that the table
spills: rows go to bucket files (numpy's raw format, appended) by a hash of their key, so equal
keys share a bucket, and groups() then sorts one bucket at a time. The bucket count is chosen from
the rows expected, so that a bucket fits in `memory_rows` too.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator, List, Optional

import numpy as np

from ..order import splitmix64

ROW_DTYPE = np.dtype([("k1", "<u8"), ("k2", "<u8"), ("ref", "<i8")])
#: Rows kept in memory by default (24 bytes each: 96 MiB).
DEFAULT_MEMORY_ROWS = 1 << 22


class KeyTable:
    """Collects rows with add(); groups() yields, for each key added more than once, its
    references (ascending). Close it (or use `with`) to remove spilled files."""

    def __init__(self, expected_rows: int, memory_rows: int = DEFAULT_MEMORY_ROWS,
                 folder: Optional[str] = None) -> None:
        self.memory_rows = max(1, int(memory_rows))
        self._expected = max(0, int(expected_rows))
        self._folder = folder
        self._held: List[np.ndarray] = []
        self._held_rows = 0
        self._spill_dir: Optional[str] = None
        self._buckets = 0
        #: rows written to bucket files so far
        self.spilled_rows = 0

    def add(self, k1: np.ndarray, k2: np.ndarray, refs: np.ndarray) -> None:
        """Add one row per reference, keyed by (k1, k2)."""
        rows = np.empty(len(refs), dtype=ROW_DTYPE)
        rows["k1"], rows["k2"], rows["ref"] = k1, k2, refs
        self._held.append(rows)
        self._held_rows += len(rows)
        if self._held_rows > self.memory_rows:
            self._spill()

    def _spill(self) -> None:
        """Append the rows held to their bucket files."""
        if self._spill_dir is None:
            self._spill_dir = tempfile.mkdtemp(prefix="shardkit-keys-", dir=self._folder)
            wanted = 2 * -(-max(self._expected, self._held_rows) // self.memory_rows)
            self._buckets = 1 << max(1, (wanted - 1).bit_length())
        rows = np.concatenate(self._held)
        self._held, self._held_rows = [], 0
        with np.errstate(over="ignore"):
            bucket = splitmix64(rows["k1"] ^ rows["k2"]) % np.uint64(self._buckets)
        bucket = bucket.astype(np.uint16 if self._buckets <= 1 << 16 else np.int64)   # numpy radix-sorts 16 bits
        order = np.argsort(bucket, kind="stable")
        rows, bucket = _take(rows, order), bucket[order]
        bounds = np.searchsorted(bucket, np.arange(self._buckets + 1))
        for number in range(self._buckets):
            if bounds[number + 1] > bounds[number]:
                with open(self._bucket_path(number), "ab") as handle:
                    rows[bounds[number]:bounds[number + 1]].tofile(handle)
        self.spilled_rows += len(rows)

    def _bucket_path(self, number: int) -> str:
        assert self._spill_dir is not None
        return os.path.join(self._spill_dir, f"bucket-{number:05d}.bin")

    def groups(self) -> Iterator[np.ndarray]:
        """The references of each key added more than once (each group ascending)."""
        if self._spill_dir is None:
            rows = np.concatenate(self._held) if self._held else np.zeros(0, dtype=ROW_DTYPE)
            self._held, self._held_rows = [], 0
            yield from _runs(rows)
            return
        if self._held:
            self._spill()
        for number in range(self._buckets):
            path = self._bucket_path(number)
            if os.path.exists(path):
                rows = np.fromfile(path, dtype=ROW_DTYPE)
                os.unlink(path)
                yield from _runs(rows)

    def close(self) -> None:
        """Remove the spilled files, if any."""
        if self._spill_dir is not None:
            shutil.rmtree(self._spill_dir, ignore_errors=True)
            self._spill_dir = None
        self._held, self._held_rows = [], 0

    def __enter__(self) -> "KeyTable":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _runs(rows: np.ndarray) -> Iterator[np.ndarray]:
    """The refs (ascending) of every key held by more than one row. Sorting every row by k1 alone
    finds the rows whose k1 repeats (few: duplicates and chance collisions of k1); only those are
    sorted by the whole key (and ref) and cut into groups."""
    if len(rows) < 2:
        return
    order = np.argsort(rows["k1"])
    first = rows["k1"][order]
    repeats = np.zeros(len(rows), dtype=bool)
    equal = first[1:] == first[:-1]
    repeats[1:] |= equal
    repeats[:-1] |= equal
    rows = _take(rows, order[repeats])
    rows = rows[np.lexsort((rows["ref"], rows["k2"], rows["k1"]))]
    same = (rows["k1"][1:] == rows["k1"][:-1]) & (rows["k2"][1:] == rows["k2"][:-1])
    starts = np.flatnonzero(np.concatenate([[True], ~same]))
    stops = np.concatenate([starts[1:], [len(rows)]])
    for start, stop in zip(starts[stops - starts > 1].tolist(), stops[stops - starts > 1].tolist()):
        yield rows["ref"][start:stop].copy()


def _take(rows: np.ndarray, order: np.ndarray) -> np.ndarray:
    """rows[order], taken as rows of three 64-bit words (numpy copies those several times faster
    than packed records)."""
    words = np.ascontiguousarray(rows).view(np.uint64).reshape(-1, 3)
    return np.take(words, order, axis=0).reshape(-1).view(ROW_DTYPE)
