"""Parsing every row of a table, once, during the scan.

Each file is parsed by parse_file — in worker processes when there are several files and
`--workers` > 1 — into its own spill (spill.py): Arrow reads the file block by block (readers.py),
values.py and the codec turn each block into feature vectors, labels and text parts, and
category values get provisional ids in that file. parse_files then merges the files' values into sorted vocabularies
and gives each file the map from its ids to the vocabulary's codes.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...codecs.tabular import Column, LabelSpec, TabularCodec
from .encode import OpenCodes, RowEncoder
from .files import TableFile
from .lines import LineTracker, record_lines
from .onto import Bases, grown
from .readers import LineCount, read_blocks
from .row_index import PartOffsets, RowIndexCheck, row_index_columns
from .spill import Spill, remove_spills
from .split import split_file
from .types import MAX_CATEGORIES, too_many_categories
from .values import category_values, dirty_rows, numbers, strings


@dataclass
class ParsedFile:
    """What parsing one file gave: its rows, its spill, and the ids it gave the
    values of each open column (category without a given vocabulary, or class label)."""

    rows: int
    spill: Spill
    codes: Dict[str, OpenCodes]
    row_offsets: Dict[int, Optional[float]]     # RowIndexCheck: the columns that number its rows
    good_rows: int


@dataclass
class ParsedTable:
    """Every file parsed: the codec with the final vocabularies, and per file its spill and the
    map (column name -> int64 array) from its ids to the final codes."""

    codec: TabularCodec
    parts: List[TableFile]          # the files, large text files split in parts; rows and first_row set
    spills: List[Spill]
    ranks: List[Dict[str, np.ndarray]]
    row_indices: Dict[str, Tuple[int, bool]]    # row_index_columns, by column name
    grown: List[str]                            # what an append added to recorded vocabularies (onto.py)


Notes = Dict[int, Tuple[int, str]]


class _Records:
    """Where a file's records start and which of them Arrow left out for their number of fields.
    A text file's are found by LineTracker, opened at the first bad row; rows of JSON Lines,
    Parquet and Arrow files are counted from 1 and never invalid."""

    def __init__(self, item: TableFile, delimiter: str) -> None:
        self.item, self.delimiter = item, delimiter
        self.pending: Deque[Tuple[int, str]] = deque()   # invalid rows Arrow reported, not yet placed
        self._tracker: Optional[LineTracker] = None
        self._passed = 0

    def take(self, start: int, good: int) -> List[Tuple[int, bool]]:
        """(line, invalid) of the records from record `start` on, through the `good`-th valid one
        (with good=0: the invalid records left at the end of the file)."""
        item = self.item
        if item.kind != "text":
            return [(item.head.data_line + row, False) for row in range(start, start + good)]
        if self._tracker is None:
            self._tracker = LineTracker(item, self.delimiter)
        self._tracker.skip(start - self._passed)
        width, expected = len(item.head.header), len(self.pending)
        found: List[Tuple[int, bool]] = []
        valid = invalid = 0
        while valid < good or (good == 0 and invalid < expected):
            record = self._tracker.record()
            if record is None:
                break
            wrong = record[1] != width and invalid < expected
            invalid += wrong
            valid += not wrong
            found.append((record[0], wrong))
        self._passed = start + len(found)
        return found

    def close(self) -> None:
        if self._tracker is not None:
            self._tracker.close()


def block_rows(codec: RowEncoder, item: TableFile, arrays: List[Any], start: int,
               records: _Records) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[List[bytes]], Notes]:
    """(feature matrix, labels, text parts or None, {row: (line, reason)} of the bad ones) of the
    records of one block: its rows, and the invalid records among them; `start` is the file's record
    number of the block's first record."""
    size = len(arrays[0]) if arrays else 0
    values = _prepare(codec, arrays, item.decimal)
    reasons: Dict[int, str] = {}
    if item.kind == "text":                    # numbers Arrow could cast hold neither NUL nor bad UTF-8
        reasons = dirty_rows(arrays, values)
    kept = None
    if reasons:
        mask = np.ones(size, dtype=bool)
        mask[np.fromiter(reasons, dtype=np.int64)] = False
        kept = np.flatnonzero(mask)
        arrays = [array.filter(mask) for array in arrays]
        values = _prepare(codec, arrays, item.decimal)
    count = size - len(reasons)
    features = len(codec.features)
    matrix, labels, bad = codec.vectors(values[:features], values[-1] if codec.label else None, count)
    tails = codec.text_tails([strings(array) for array in arrays[features:len(codec.columns)]], count) \
        if codec.texts else None
    if kept is not None:                       # back to the block's rows
        reasons.update((int(kept[row]), why) for row, why in bad.items())
        matrix, labels, tails = _spread(kept, size, matrix, labels, tails)
    else:
        reasons.update(bad)
    if not reasons and not records.pending:
        return matrix, labels, tails, {}
    found = records.take(start, size)
    wrong = [index for index, (_, invalid) in enumerate(found) if invalid]
    if len(found) - len(wrong) != size:        # the two parsers disagree: leave the invalid ones for later
        found, wrong = found[:size] + [(-1, False)] * (size - len(found)), []
    rows = np.setdiff1d(np.arange(len(found)), wrong)
    notes = {int(rows[row]): why for row, why in reasons.items()}
    for index in wrong:
        notes[index] = _invalid_reason(*records.pending.popleft(), len(item.head.header))
    if wrong:
        matrix, labels, tails = _spread(rows, len(found), matrix, labels, tails)
    return matrix, labels, tails, {row: (found[row][0], why) for row, why in sorted(notes.items())}


def invalid_rows(records: _Records, start: int) -> Tuple[np.ndarray, Dict[int, Tuple[int, str]]]:
    """The invalid records Arrow reported that no block placed (those at the end of the file)."""
    found = records.take(start, 0) if records.pending else []
    lines = [line for line, _ in found] + [-1] * (len(records.pending) - len(found))
    notes = {index: (line, _invalid_reason(*records.pending.popleft(), len(records.item.head.header)))
             for index, line in enumerate(lines)}
    return np.asarray(sorted(notes)), notes


def _kinds(codec: TabularCodec) -> List[str]:
    """The type of each array read (features, text columns, label): float, int, category or text."""
    kinds = [column.type for column in codec.columns]
    if codec.label is not None:
        kinds.append("int" if codec.label.kind == "int" else "category")
    return kinds


def _prepare(codec: TabularCodec, arrays: List[Any], decimal: Optional[str]) -> List[Any]:
    """What the codec converts, per array (features, text columns, label): numbers or distinct values."""
    return [numbers(array, decimal) if kind in ("float", "int") else
            category_values(array) if kind == "category" else None
            for kind, array in zip(_kinds(codec), arrays)]


def _invalid_reason(fields: int, text: str, width: int) -> str:
    if text.count('"') % 2:
        return "quoted field not closed before the end of the file"
    return f"row has {fields} fields, the header has {width}"


def _spread(rows: np.ndarray, total: int, matrix: np.ndarray, labels: Optional[np.ndarray],
            tails: Optional[List[bytes]]) -> Tuple[np.ndarray, Optional[np.ndarray], Optional[List[bytes]]]:
    """The values of the given rows placed at those rows of `total` (the others zero, -1, empty)."""
    full = np.zeros((total, matrix.shape[1]), dtype=matrix.dtype)
    full[rows] = matrix
    full_labels = None
    if labels is not None:
        full_labels = np.full(total, -1, dtype=np.int64)
        full_labels[rows] = labels
    full_tails = None
    if tails is not None:
        full_tails = [b""] * total
        for index, row in enumerate(rows.tolist()):
            full_tails[row] = tails[index]
    return full, full_labels, full_tails


def parse_file(job: Tuple[TableFile, Sequence[Column], str, Optional[LabelSpec], str, int, str, str],
               advance: Callable[[int, int], None] = lambda items, nbytes: None) -> ParsedFile:
    """Parse one file into a new spill (in a worker process, or in the scan's own with a progress bar)."""
    item, columns, dtype, label, delimiter, owner, tag, directory = job
    codec = RowEncoder(columns, dtype, label)
    spill = Spill(dtype, len(codec.features), bool(codec.texts), owner=owner, tag=tag, directory=directory)
    fields = item.indices + ([item.label_index] if item.label_index is not None else [])
    records = _Records(item, delimiter)
    index_check = RowIndexCheck(_numeric_slots(codec))
    line_ends = LineCount()
    rows = 0
    try:
        kinds = _kinds(codec)
        categories = [position for position, kind in enumerate(kinds) if kind == "category"]
        numeric = [position for position, kind in enumerate(kinds) if kind in ("float", "int")] \
            if item.decimal is None else []
        for block in read_blocks(item, fields, delimiter, categories=categories, numeric=numeric, lines=line_ends):
            records.pending.extend(block.invalid)
            matrix, labels, tails, notes = block_rows(codec, item, block.arrays, rows, records)
            spill.append(matrix, labels, tails, notes)
            index_check.add(matrix, notes, rows)
            rows += len(matrix)
            for name, codes in codec.open_codes().items():
                if len(codes.names) > MAX_CATEGORIES:
                    raise too_many_categories(name, f"{item.name}")
        if records.pending:
            placed, notes = invalid_rows(records, rows)
            spill.append(np.zeros((len(placed), len(codec.features)), dtype=dtype), None,
                         [b""] * len(placed) if codec.texts else None, notes)
            rows += len(placed)
        if item.kind in ("text", "json") and not line_ends.one_per_line(rows, lone_cr_ends=item.kind == "text"):
            spill.set_lines(record_lines(item, delimiter, rows))
        spill.finish()
    except BaseException:
        spill.discard()
        raise
    finally:
        records.close()
    advance(part_bytes(item), part_bytes(item))
    return ParsedFile(rows, spill, codec.open_codes(), index_check.offsets, index_check.rows)


def _numeric_slots(codec: TabularCodec) -> List[int]:
    """The positions of the number columns among the features."""
    return [slot for slot, column in enumerate(codec.features) if column.type in ("float", "int")]


def parse_files(files: List[TableFile], codec: TabularCodec, delimiter: str, workers: int, quiet: bool,
                where: str, bases: Optional[Bases] = None) -> ParsedTable:
    """Parse every file — large text files split in parts — in `workers` processes when there are
    several parts, set each file's rows and first row, and merge the vocabularies (those of `bases`
    grow at their end: onto.py). `where` names SRC in errors."""
    from ...runtime.interrupt import SigintLatch
    from ...runtime.progress import Progress
    from ...runtime.workers import run_in_workers
    owner, tag, directory = os.getpid(), secrets.token_hex(4), tempfile.gettempdir()   # workers use ours
    label = codec.label
    parts = [part for item in files for part in split_file(item, workers)]
    jobs = [(part, codec.columns, codec.dtype, label, delimiter, owner, tag, directory) for part in parts]
    parsed: List[Optional[ParsedFile]] = [None] * len(parts)
    try:
        with Progress(sum(item.size for item in files), "scan table", quiet=quiet, unit="B") as bar:
            if workers > 1 and len(parts) > 1:
                def done(index: int, result: ParsedFile) -> None:
                    parsed[index] = result
                    bar.advance(part_bytes(parts[index]), part_bytes(parts[index]))
                with SigintLatch() as latch, latch.deferred():
                    run_in_workers(parse_file, jobs, min(workers, len(parts)), on_done=done, poll=latch.check)
            else:
                for index in range(len(parts)):
                    parsed[index] = parse_file(jobs[index], advance=bar.advance)
        results = [result for result in parsed if result is not None]
        first_row = 0
        for part, result in zip(parts, results):
            part.rows, part.first_row = result.rows, first_row
            first_row += result.rows
        for item in files:
            mine = [part for part in parts if part.path == item.path]
            item.rows, item.first_row = sum(part.rows for part in mine), mine[0].first_row
        table = _merge(codec, parts, results, where, bases or {})
        table.row_indices = _row_indices(codec, files, parts, results)
        return table
    except BaseException:
        remove_spills(owner, tag, directory)      # also those of files whose worker was stopped
        raise


def part_bytes(part: TableFile) -> int:
    """Bytes of a file, or of the byte range of one part of a split file."""
    if part.groups is not None:                # the row groups of a Parquet file: counted with the first
        return part.size if part.groups[0] == 0 else 0
    return part.stop - part.head.data_offset if part.stop is not None else part.size


def _merge(codec: TabularCodec, parts: List[TableFile], results: List[ParsedFile], where: str,
           bases: Bases) -> ParsedTable:
    """Sorted vocabularies over all files (or a base's grown one), and each file's map from its ids to their codes."""
    opened = list(results[0].codes) if results else []          # the same columns in every file
    vocabularies: Dict[str, List[str]] = {}
    notes: List[str] = []
    label = codec.label
    for name in opened:
        values = sorted(set().union(*(result.codes[name].names for result in results)))
        if name in bases:
            values, note = grown(name, bases[name], values, label is not None and name == label.name)
            notes += [note] if note else []
        if len(values) > MAX_CATEGORIES:
            raise too_many_categories(name, where)
        vocabularies[name] = values
    ranks = [{name: result.codes[name].ranks(vocabularies[name]) for name in opened} for result in results]
    columns = [Column(column.name, column.type, tuple(vocabularies[column.name]))
               if column.name in vocabularies else column for column in codec.columns]
    if label is not None and label.name in vocabularies:
        label = LabelSpec(label.name, "class", tuple(vocabularies[label.name]))
    return ParsedTable(TabularCodec(columns, codec.dtype, label), parts, [result.spill for result in results], ranks,
                       {}, notes)


def _row_indices(codec: TabularCodec, files: List[TableFile], parts: List[TableFile],
                 results: List[ParsedFile]) -> Dict[str, Tuple[int, bool]]:
    """The number columns that only number the rows (row_index.py), by name."""
    starts = {item.path: item.first_row for item in files}
    offsets = [PartOffsets(part.first_row - starts[part.path], part.first_row, result.good_rows, result.row_offsets)
               for part, result in zip(parts, results)]
    found = row_index_columns(offsets, _numeric_slots(codec))
    return {codec.features[slot].name: value for slot, value in found.items()}


__all__ = ["ParsedFile", "ParsedTable", "block_rows", "parse_file", "parse_files"]
