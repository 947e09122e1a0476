"""Splitting one large file into parts that worker processes parse at once.

A Parquet file is split into runs of whole row groups. A delimited text file is split into
byte ranges: a range starts right after a newline that ends a record: one preceded by an even number of
quote characters since the data began (RFC 4180 quoting keeps quotes paired, doubled ones
included), so a quoted newline never splits a record. The parts are found by counting quotes
and newlines in one pass over the file (at memchr speed); each part knows the line it starts
on, so bad rows keep their line numbers. Compressed files are not split.
"""
from __future__ import annotations

import dataclasses
import io
from typing import BinaryIO, List

import numpy as np

from .files import TableFile, pin, split_suffix

#: Files smaller than this are parsed whole; parts are at least this large. A part is parsed by a
#: worker started for it (a new interpreter: about half a second to a second of imports), which
#: pays only when parsing the part alone takes longer: about 64 MB of text (benchmarks/append.py
#: --tables: an append of a 25 MB table took 2.2 s with 8 MB parts, 0.7 s parsed in one process).
MIN_PART_BYTES = 64 << 20
_READ = 1 << 20


def split_file(item: TableFile, parts: int) -> List[TableFile]:
    """The file as up to `parts` consecutive parts (itself when it is small, compressed or not text)."""
    if item.kind == "parquet" and parts > 1:
        return _row_group_parts(item, parts)
    start = item.head.data_offset
    if parts < 2 or item.kind != "text" or split_suffix(item.path)[1] is not None or \
            item.size - start < 2 * MIN_PART_BYTES:
        return [item]
    step = max(MIN_PART_BYTES, (item.size - start) // parts)
    targets = list(range(start + step, item.size - MIN_PART_BYTES // 2, step))
    with pin(item) as name:
        cuts = _record_ends(name, start, targets)
    found: List[TableFile] = []
    line, offset = item.head.data_line, start
    for cut, lines in cuts + [(item.size, 0)]:
        if cut <= offset:
            continue
        head = dataclasses.replace(item.head, data_offset=offset, data_line=line)
        found.append(dataclasses.replace(item, head=head, stop=cut if cut < item.size else None))
        line, offset = item.head.data_line + lines, cut
    return found


def _row_group_parts(item: TableFile, parts: int) -> List[TableFile]:
    """Consecutive runs of the file's row groups, about `parts` of them, each knowing its first row."""
    import pyarrow.parquet as pq
    with pin(item) as name, pq.ParquetFile(name) as parquet:
        sizes = [parquet.metadata.row_group(group).num_rows for group in range(parquet.num_row_groups)]
    if len(sizes) < 2:
        return [item]
    step = -(-len(sizes) // min(parts, len(sizes)))
    found = []
    for first in range(0, len(sizes), step):
        head = dataclasses.replace(item.head, data_line=item.head.data_line + sum(sizes[:first]))
        found.append(dataclasses.replace(item, head=head, groups=(first, min(first + step, len(sizes)))))
    return found


def _record_ends(path: str, start: int, targets: List[int]) -> List[tuple]:
    """(offset just after the first record-ending newline at or after each target, newlines before it
    since `start`), in order; targets past the last such newline are dropped."""
    found = []
    quotes = newlines = 0
    position = start
    pending = list(targets)
    with open(path, "rb") as handle:
        handle.seek(start)
        while pending:
            data = handle.read(_READ)
            if not data:
                break
            end = position + len(data)
            while pending and pending[0] < end:
                cut = _first_even_newline(data, max(0, pending[0] - position), quotes)
                if cut is None:
                    break
                found.append((position + cut + 1, newlines + data.count(b"\n", 0, cut + 1)))
                pending.pop(0)
                while pending and pending[0] <= position + cut:
                    pending.pop(0)
            quotes += data.count(b'"')
            newlines += data.count(b"\n")
            position = end
    return found


def _first_even_newline(data: bytes, begin: int, quotes_before: int) -> "int | None":
    """Index in data of the first newline at or after `begin` with an even number of quotes before it."""
    array = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(array[begin:] == 10) + begin
    if not len(newlines):
        return None
    quote_positions = np.flatnonzero(array == 34)
    parity = (quotes_before + np.searchsorted(quote_positions, newlines)) % 2
    even = np.flatnonzero(parity == 0)
    return int(newlines[even[0]]) if len(even) else None


class RangeReader(io.RawIOBase):
    """Bytes [start, stop) of a file, as a stream."""

    def __init__(self, path: str, start: int, stop: int) -> None:
        super().__init__()
        self._file: BinaryIO = open(path, "rb", buffering=0)
        self._file.seek(start)
        self._left = stop - start

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "bytearray | memoryview") -> int:  # type: ignore[override]
        size = min(len(buffer), self._left)
        if size <= 0:
            return 0
        got = self._file.readinto(memoryview(buffer)[:size]) or 0    # type: ignore[attr-defined]
        self._left -= got
        return got

    def close(self) -> None:
        self._file.close()
        super().close()


def open_range(path: str, start: int, stop: int) -> BinaryIO:
    """A buffered stream of bytes [start, stop) of the file."""
    return io.BufferedReader(RangeReader(path, start, stop), _READ)  # type: ignore[return-value]


__all__ = ["MIN_PART_BYTES", "open_range", "split_file"]
