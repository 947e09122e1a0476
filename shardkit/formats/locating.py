"""Checks shared by the formats whose shards record where their bytes lie (HDF5 and PT, version 3).

A locator lists byte ranges of the file; a reader trusts it only as far as these checks go: every
range inside the part of the file it may describe, no two overlapping, and the bytes outside the
ranges (the format library's own metadata) unchanged since the writer recorded their CRC32.
"""
from __future__ import annotations

import mmap
import os
import zlib
from dataclasses import dataclass
from typing import Any, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .mapping import map_region


Range = Tuple[int, int]


def spans(ranges: Iterable[Range]) -> List[Range]:
    """(begin, end) of every non-empty (offset, size) range, sorted."""
    return sorted((offset, offset + size) for offset, size in ranges if size)


def range_problem(ranges: Iterable[Range], start: int, stop: int, where: str) -> Optional[str]:
    """Why (offset, size) ranges cannot all lie in bytes [start, stop) of a file without overlapping
    (where: what lies before start, e.g. "the userblock"), or None."""
    sorted_spans = spans(ranges)
    end = max((high for _, high in sorted_spans), default=0)
    if end > stop:
        return f"a range ends at byte {end}, past the end of the file's {stop} bytes it may describe"
    end = start
    for begin, high in sorted_spans:
        if begin < end:
            return f"ranges overlap or lie in {where} (at byte {begin})"
        end = high
    return None


def gaps_crc32(view: Any, ranges: Iterable[Range], start: int, stop: int) -> int:
    """CRC32 of bytes [start, stop) of view (bytes, a map or a FileView) that no (offset, size)
    range covers, in file order."""
    if isinstance(view, FileView):
        view = view.through(stop)
    crc, position = 0, start
    for begin, end in spans(ranges):
        if begin > position:
            crc = zlib.crc32(view[position:begin], crc)
        if end > position:
            position = end
    return zlib.crc32(view[position:stop], crc)


def close_map(mapping: Optional[mmap.mmap]) -> None:
    """Close a reader's map, unless a sample view it returned still uses it (then the map closes
    when the last such view is freed)."""
    if mapping is not None:
        try:
            mapping.close()
        except BufferError:
            pass


class FileView:
    """The bytes of an open file as a locator's checks read them: a few small ranges, sliced out of
    the bytes read first from its start (a shard's locator and, in a small shard, the whole file)
    or read with one pread each, never through a fresh map (whose first touch of each page costs
    a fault)."""

    def __init__(self, fd: int, size: int, first: bytes) -> None:
        self.fd, self.size = fd, size
        self._first = memoryview(first)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, item: slice) -> "bytes | memoryview":
        begin, end = item.start, item.stop          # what gaps_crc32 asks: 0 <= start <= stop <= size
        if not (isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= self.size):
            raise IndexError(f"bytes {begin}:{end} of a file of {self.size}")
        if end <= len(self._first):
            return self._first[begin:end]
        data = os.pread(self.fd, end - begin, begin)
        if len(data) != end - begin:
            raise OSError(f"read {len(data)} of {end - begin} bytes at {begin}: the file changed size")
        return data

    def through(self, end: int) -> "FileView | memoryview":
        """What to slice bytes [0, end) from at their file offsets: the bytes read first when they
        reach that far (each slice then native, no check), else this view."""
        return self._first if end <= len(self._first) and end <= self.size else self


class FileRows(NamedTuple):
    """A shard's rows as one run of bytes of its file, as the row arena maps them
    (read/row_arena.py): `row_count` rows of `dtype` (a row's element type) and `shape` from
    `offset`; `readahead` False where the reader's map reads no more than the pages touched."""

    dtype: np.dtype
    shape: Tuple[int, ...]
    row_count: int
    offset: int
    readahead: bool = True

    @property
    def row_dtype(self) -> np.dtype:
        """One row as one dtype (the element type with the row's shape)."""
        return np.dtype((self.dtype, self.shape))


@dataclass(frozen=True)
class Location:
    """Where a shard's fixed-shape rows, int64 labels and CRC32s lie in its file, as the format's
    own record says (ShardFormat.locate), after that record's own checks. A dataset maps the rows
    from it only once checked.CheckedShards.locate has compared its count and identity with the
    manifest and its labels and CRC32s with the sample table."""

    count: int
    dataset_id: Optional[str]
    rows: FileRows
    labels: Range                   # (offset, bytes) of count int64 labels
    crcs: Range                     # (offset, bytes) of count CRC32s of crc_dtype
    crc_dtype: str = "<u4"
    #: The file as the record's own checks read it: the ranges above are sliced from the bytes read
    #: then where they hold them (a small shard: no other read); None: one pread each.
    view: Optional["FileView"] = None


def map_rows(view: mmap.mmap, dtype: np.dtype, shape: Sequence[int], count: int, offset: int) -> np.ndarray:
    """`count` fixed-shape rows at `offset` of a map as one read-only (count, *shape) array made by
    np.frombuffer with a sub-array dtype. It holds a buffer export, so the map cannot be closed
    under it (np.ndarray(buffer=...) holds none: the map then closes and its address is reused),
    and it is the base of every row view taken from it: a read touches this one array, not also
    the flat array a reshape of a view would leave between (benchmarks/read_parts.py)."""
    return np.frombuffer(view, dtype=np.dtype((dtype, tuple(shape))), count=count, offset=offset)


def map_file(fd: int, size: int, readahead: bool = True) -> mmap.mmap:
    """A read-only map of the whole open file, holding no descriptor (mapping.map_region), which
    must still have the size its locator was checked against (ValueError otherwise: the file
    changed after the check)."""
    actual = os.fstat(fd).st_size
    if actual != size:
        raise ValueError(f"the file has {actual} bytes, {size} when it was checked")
    return map_region(fd, 0, size, readahead)[0]


class opened:
    """`with opened(path, fd) as descriptor`: fd when the caller opened (and checked) the file
    already, else a read-only descriptor of path closed on exit: the located formats read through
    whichever they are given. A class, not a generator context manager, which costs several us of
    every shard's first open."""

    __slots__ = ("_path", "_fd", "_own")

    def __init__(self, path: str, fd: Optional[int]) -> None:
        self._path, self._fd = path, fd
        self._own: Optional[int] = None

    def __enter__(self) -> int:
        if self._fd is not None:
            return self._fd
        own = self._own = os.open(self._path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return own

    def __exit__(self, *exc_info: Any) -> None:
        if self._own is not None:
            os.close(self._own)
            self._own = None
