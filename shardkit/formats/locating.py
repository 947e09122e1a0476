"""Checks shared by the formats whose shards record where their bytes lie (HDF5 and PT, version 3).

A locator lists byte ranges of the file; a reader trusts it only as far as these checks go: every
range inside the part of the file it may describe, no two overlapping, and the bytes outside the
ranges (the format library's own metadata) unchanged since the writer recorded their CRC32.
"""
from __future__ import annotations

import contextlib
import mmap
import os
import zlib
from typing import Any, Callable, Iterable, Iterator, List, Optional, Tuple

import numpy as np

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
    """CRC32 of bytes [start, stop) of view that no (offset, size) range covers, in file order."""
    crc, position = 0, start
    for begin, end in spans(ranges):
        crc = zlib.crc32(view[position:max(position, begin)], crc)
        position = max(position, end)
    return zlib.crc32(view[position:stop], crc)


def close_map(mapping: Optional[mmap.mmap]) -> None:
    """Close a reader's map, unless a sample view it returned still uses it (then the map closes
    when the last such view is freed)."""
    if mapping is not None:
        try:
            mapping.close()
        except BufferError:
            pass


def map_if(fd: int, describes: Callable[[Any], bool]) -> Optional[mmap.mmap]:
    """A read-only map of the open file when describes(its bytes as a uint8 array) holds (the
    locator was written for this very file); None, with nothing left mapped, otherwise."""
    view = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
    flat = np.frombuffer(view, dtype=np.uint8)
    matches = describes(flat)
    del flat                    # no export of the map may outlive the check
    if matches:
        return view
    view.close()
    return None


@contextlib.contextmanager
def opened(path: str, fd: Optional[int]) -> Iterator[int]:
    """fd when the caller opened (and checked) the file already, else a read-only descriptor of
    path closed on exit: the located formats read through whichever they are given."""
    if fd is not None:
        yield fd
        return
    own = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        yield own
    finally:
        os.close(own)
