"""Finding a numeric column that only numbers the rows (R's row names, a pandas index written out).

Such a column becomes a feature like any other, and on a table sorted by its label it predicts
the label perfectly: the scan warns about it. Each parsed part keeps, per numeric column, the
offset `value - row position` while it stays the same for every good row (RowIndexCheck, a
constant-time test per block and column, the full comparison only for columns that pass it);
once every part is parsed, row_index_columns decides whether the offsets make the column run
0..n-1 or 1..n, within each file or over the whole table.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

#: Fewer good rows than this say nothing (a 0/1 feature of a two-row table would look like an index).
MIN_ROWS = 3


class RowIndexCheck:
    """The numeric feature columns of one part whose values so far are `offset + row position`."""

    def __init__(self, slots: Sequence[int]) -> None:
        self.offsets: Dict[int, Optional[float]] = {slot: None for slot in slots}   # None: no good row yet
        self.rows = 0       # good rows seen

    def add(self, matrix: np.ndarray, bad: Iterable[int], start: int) -> None:
        """The feature matrix of the records from position `start` on; rows `bad` hold no values."""
        if not self.offsets or not len(matrix):
            return
        good = np.ones(len(matrix), dtype=bool)
        good[np.fromiter(bad, dtype=np.int64)] = False
        positions = np.flatnonzero(good).astype(np.float64) + start
        if not len(positions):
            return
        self.rows += len(positions)
        for slot in list(self.offsets):
            values = matrix[good, slot].astype(np.float64)
            offset = self.offsets[slot]
            if offset is None:
                offset = values[0] - positions[0]
            ends_fit = values[0] - positions[0] == offset and values[-1] - positions[-1] == offset
            if ends_fit and bool(np.all(values - positions == offset)):
                self.offsets[slot] = float(offset)
            else:
                del self.offsets[slot]


@dataclass
class PartOffsets:
    """What one parsed part says: its first record's position in its file and in the table, and
    the offset of each column that numbers its rows (None: the part has no good row)."""

    file_position: int
    table_position: int
    rows: int
    offsets: Dict[int, Optional[float]]


def row_index_columns(parts: List[PartOffsets], slots: Sequence[int]) -> Dict[int, Tuple[int, bool]]:
    """The columns (of `slots`) that number the rows 0..n-1 or 1..n over the whole table, or within
    each file: {slot: (first number, whether it starts again in each file)}."""
    found: Dict[int, Tuple[int, bool]] = {}
    if sum(part.rows for part in parts) < MIN_ROWS:
        return found
    for slot in slots:
        if not all(slot in part.offsets for part in parts):
            continue
        for per_file in (False, True):
            starts = {offset - (part.file_position if per_file else part.table_position)
                      for part in parts for offset in [part.offsets[slot]] if offset is not None}
            if len(starts) == 1 and starts <= {0.0, 1.0}:
                found[slot] = (int(starts.pop()), per_file)
                break
    return found


__all__ = ["MIN_ROWS", "PartOffsets", "RowIndexCheck", "row_index_columns"]
