"""The line each record of a text table starts on, where Arrow's reader cannot say.

A row's key and its skipped.jsonl entry name the physical line its first line is on (a record
with a quoted newline spans several lines; blank lines hold no record). Most files hold one
record per line, which the count of line ends the parse already made shows (readers.LineCount):
record i is then on line data_line + i, and nothing is read again. For the others — quoted
newlines, blank lines, CR line ends — record_lines reads the file a second time: delimited text
with Python's csv module (LineTracker, which splits records as Arrow does), JSON Lines line by line.
"""
from __future__ import annotations

import csv
import io
from typing import List, Optional, Tuple

import numpy as np

from .files import TableFile, read_some
from .readers import open_rows


class LineTracker:
    """The line where each record of a text file starts, in order, counted by Python's csv module
    (which splits records as Arrow does: quoted newlines, LF, CRLF and CR line ends, blank lines
    left out)."""

    def __init__(self, item: TableFile, delimiter: str) -> None:
        self._handle = open_rows(item)
        text = io.TextIOWrapper(self._handle, encoding="utf-8", errors="surrogateescape", newline="")  # type: ignore
        self._reader = csv.reader(text, delimiter=delimiter, strict=False)
        self._base = item.head.data_line

    def skip(self, count: int) -> None:
        """Pass over the next `count` records."""
        for _ in range(count):
            if self.record() is None:
                return

    def record(self) -> Optional[Tuple[int, int]]:
        """(start line, number of fields; -1 if unreadable) of the next record, None at the end."""
        while True:
            before = self._reader.line_num
            try:
                row: Optional[List[str]] = next(self._reader)
            except StopIteration:
                return None
            except csv.Error:
                row = None
            if row != []:
                return self._base + before, -1 if row is None else len(row)

    def close(self) -> None:
        """Close the file."""
        self._handle.close()


def record_lines(item: TableFile, delimiter: str, records: int) -> np.ndarray:
    """The start line of each of the `records` records of a text or JSON Lines file (or part), int64.
    Should the second reading find fewer records than the parse did, the missing ones follow the
    last line found, one line each (never fewer lines than records: keys stay distinct)."""
    found = _json_lines(item) if item.kind == "json" else _text_lines(item, delimiter, records)
    lines = np.asarray(found[:records], dtype=np.int64)
    if len(lines) < records:
        last = int(lines[-1]) if len(lines) else item.head.data_line - 1
        lines = np.concatenate([lines, np.arange(last + 1, last + 1 + records - len(lines), dtype=np.int64)])
    return lines


def _text_lines(item: TableFile, delimiter: str, records: int) -> List[int]:
    tracker = LineTracker(item, delimiter)
    try:
        found: List[int] = []
        while len(found) < records:
            record = tracker.record()
            if record is None:
                break
            found.append(record[0])
        return found
    finally:
        tracker.close()


def _json_lines(item: TableFile) -> List[int]:
    """The numbers of the lines that are not blank (Arrow's JSON reader skips blank ones)."""
    found: List[int] = []
    number, tail = item.head.data_line, b""
    with open_rows(item) as handle:
        while True:
            data = read_some(handle, 1 << 20, item.name)
            if not data:
                break
            lines = (tail + data).split(b"\n")
            tail = lines.pop()
            for line in lines:
                if line.strip():
                    found.append(number)
                number += 1
    if tail.strip():
        found.append(number)
    return found


__all__ = ["LineTracker", "record_lines"]
