"""Parsing every row of a CSV table with string columns, once, during the scan.

Each file is parsed by parse_file — in worker processes when there are several files and
`--workers` > 1 — into its own spill (csv_spill): category values get ids in order of first
appearance in that file. parse_files then merges the files' values into sorted vocabularies
and gives each file the map from its ids to the vocabulary's codes.
"""
from __future__ import annotations

import os
import secrets
import tempfile
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..codecs.tabular import Column, LabelSpec, OpenCodes, TabularCodec
from .csv_read import Chunk, all_complete
from .csv_scan import CsvFile, scan_file
from .csv_schema import MAX_CATEGORIES, too_many_categories
from .csv_spill import Spill, remove_spills


@dataclass
class ParsedFile:
    """What parsing one file gave: its rows and checkpoints, its spill, and the ids it gave the
    values of each open column (category without a given vocabulary, or class label)."""

    rows: int
    checkpoints: np.ndarray
    spill: Spill
    codes: Dict[str, OpenCodes]


@dataclass
class ParsedTable:
    """Every file parsed: the codec with the final vocabularies, and per file its spill and the
    map (column name -> int64 array) from its ids to the final codes."""

    codec: TabularCodec
    spills: List[Spill]
    ranks: List[Dict[str, np.ndarray]]


def chunk_vectors(codec: TabularCodec, item: CsvFile, chunk: Chunk, begin: int, end: int,
                  values: Optional[np.ndarray] = None) -> Tuple[np.ndarray, Optional[np.ndarray],
                                                                Optional[List[bytes]], Dict[int, str]]:
    """(feature matrix, labels, text parts or None, reason of each bad row) of records [begin, end)
    of a chunk, one entry per record; `values` are the fields already parsed as numbers, if they were."""
    count = end - begin
    reasons: Dict[int, str] = {}
    kept: Optional[List[int]] = None
    if values is not None:
        columns: List[Any] = [values[:, position] for position in item.indices]
        label_values: Any = values[:, item.label_index] if item.label_index is not None else None
    else:
        rows = chunk.rows[begin:end]
        fields = len(item.head.header)
        for position, row in enumerate(() if all_complete(rows, fields) else rows):
            if row is None:
                reasons[position] = chunk.errors.get(begin + position, "unreadable record")
            elif len(row) != fields:
                reasons[position] = f"row has {len(row)} fields, the header has {fields}"
        if reasons:
            kept = [position for position in range(count) if position not in reasons]
            rows = [rows[position] for position in kept]
        table = list(zip(*rows)) if rows else [()] * fields
        columns = [table[position] for position in item.indices]
        label_values = table[item.label_index] if item.label_index is not None else None
    good = count - len(reasons)
    features = len(codec.features)
    matrix, labels, bad = codec.vectors(columns[:features], label_values, good)
    tails = codec.text_tails(columns[features:], good) if codec.texts else None
    if kept is None:
        return matrix, labels, tails, bad
    where = np.asarray(kept, dtype=np.int64)
    full = np.zeros((count, features), dtype=matrix.dtype)
    full[where] = matrix
    if labels is not None:
        all_labels = np.full(count, -1, dtype=np.int64)
        all_labels[where] = labels
        labels = all_labels
    if tails is not None:
        all_tails = [b""] * count
        for index, position in enumerate(kept):
            all_tails[position] = tails[index]
        tails = all_tails
    reasons.update((kept[index], reason) for index, reason in bad.items())
    return full, labels, tails, reasons


def parse_file(job: Tuple[CsvFile, Sequence[Column], str, Optional[LabelSpec], str, int, str, str],
               advance: Callable[[int, int], None] = lambda items, nbytes: None) -> ParsedFile:
    """Parse one file into a new spill (in a worker process, or in the scan's own with a progress bar)."""
    item, columns, dtype, label, delimiter, owner, tag, directory = job
    codec = TabularCodec(columns, dtype, label)
    spill = Spill(dtype, len(codec.features), bool(codec.texts), owner=owner, tag=tag, directory=directory)

    def spill_chunk(chunk: Chunk) -> None:
        matrix, labels, tails, reasons = chunk_vectors(codec, item, chunk, 0, len(chunk))
        spill.append(matrix, labels, tails, {position: (chunk.line_of(position), reason)
                                             for position, reason in reasons.items()},
                     [chunk.line_of(position) for position in range(len(chunk))])
        for name, codes in codec.open_codes().items():
            if len(codes.names) > MAX_CATEGORIES:
                raise too_many_categories(name, f"{item.name}:{chunk.first_line}")

    try:
        rows, checkpoints = scan_file(item, delimiter, on_chunk=spill_chunk, advance=advance)
        spill.finish()
    except BaseException:
        spill.discard()
        raise
    return ParsedFile(rows, checkpoints, spill, codec.open_codes())


def parse_files(files: List[CsvFile], codec: TabularCodec, delimiter: str, workers: int, quiet: bool,
                where: str) -> ParsedTable:
    """Parse every file (in `workers` processes when there are several files), set each file's
    rows, first row and checkpoints, and merge the vocabularies. `where` names SRC in errors."""
    from ..interrupt import SigintLatch
    from ..progress import Progress
    from ..workers import run_in_workers
    owner, tag, directory = os.getpid(), secrets.token_hex(4), tempfile.gettempdir()   # workers use ours
    label = codec.label
    jobs = [(item, codec.columns, codec.dtype, label, delimiter, owner, tag, directory) for item in files]
    parsed: List[Optional[ParsedFile]] = [None] * len(files)
    try:
        with Progress(sum(item.size for item in files), "scan csv", quiet=quiet, unit="B") as bar:
            if workers > 1 and len(files) > 1:
                def done(index: int, result: ParsedFile) -> None:
                    parsed[index] = result
                    bar.advance(files[index].size, files[index].size)
                with SigintLatch() as latch, latch.deferred():
                    run_in_workers(parse_file, jobs, min(workers, len(files)), on_done=done, poll=latch.check)
            else:
                for index, item in enumerate(files):
                    parsed[index] = parse_file(jobs[index], advance=bar.advance)
        results = [result for result in parsed if result is not None]
        first_row = 0
        for item, result in zip(files, results):
            item.rows, item.checkpoints, item.first_row = result.rows, result.checkpoints, first_row
            first_row += result.rows
        return _merge(codec, results, where)
    except BaseException:
        remove_spills(owner, tag, directory)      # also those of files whose worker was stopped
        raise


def _merge(codec: TabularCodec, results: List[ParsedFile], where: str) -> ParsedTable:
    """Sorted vocabularies over all files, and each file's map from its ids to their codes."""
    opened = list(results[0].codes) if results else []          # the same columns in every file
    vocabularies: Dict[str, List[str]] = {}
    for name in opened:
        values = sorted(set().union(*(result.codes[name].names for result in results)))
        if len(values) > MAX_CATEGORIES:
            raise too_many_categories(name, where)
        vocabularies[name] = values
    ranks = [{name: result.codes[name].ranks(vocabularies[name]) for name in opened} for result in results]
    columns = [Column(column.name, column.type, tuple(vocabularies[column.name]))
               if column.name in vocabularies else column for column in codec.columns]
    label = codec.label
    if label is not None and label.name in vocabularies:
        label = LabelSpec(label.name, "class", tuple(vocabularies[label.name]))
    return ParsedTable(TabularCodec(columns, codec.dtype, label), [result.spill for result in results], ranks)


__all__ = ["ParsedFile", "ParsedTable", "chunk_vectors", "parse_file", "parse_files"]
