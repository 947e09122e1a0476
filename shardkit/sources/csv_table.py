"""CSV trees: one .csv / .csv.gz file, or a folder of them (recursively, sorted), one sample per row.

Opening the source reads each file's header, infers the column types from a bounded sample,
then streams every file once, in ~1 MiB chunks of whole records. Shards are cut by row count.
Each file is split into fields once, whatever its columns:

- all-numeric tables: the scan only counts rows and keeps a checkpoint (row, byte offset, line)
  per chunk; encode_range() seeks to the checkpoint before its first row and parses from there
  (numpy's C parser for plain numbers), in whichever worker writes the shard;
- tables with string columns: the scan parses every row, collecting the vocabularies, and
  spills the parsed rows to temporary files (csv_spill); encode_range() reads its rows back
  and turns the provisional category ids into codes of the sorted vocabularies.

Memory follows the chunk and shard size, never the file size.
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import os
import warnings
import weakref
from itertools import repeat
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..codecs.tabular import Column, EncodedBatch, TabularCodec
from ..errors import EmptySourceError, SourceError, UsageError
from ..records import EncodedRows
from .base import Converted, ConvertedRun, Outcome, SampleBytes, Skipped, Source
from .csv_read import Chunk, normalize_delimiter
from .csv_parse import ParsedTable, chunk_vectors, parse_files
from .csv_scan import (CsvFile, count_all, holds_csv_tree, is_csv_path, label_spec, read_heads, sample, select,
                       stream_file)
from .csv_schema import describe_columns, infer_type, load_schema_file, needs_float64

_FAST_DELIMITERS = (",", "\t", ";", "|")
#: Rows read back from the spill at a time.
SPILL_BLOCK = 1 << 16


class CsvTableSource(Source):
    """Rows of CSV files as tabular samples (see docs/csv.md)."""

    kind = "csv"

    def __init__(self, files: List[CsvFile], codec: TabularCodec, delimiter: str, summary: Dict[str, Any],
                 skipped: List[Skipped], parsed: Optional[ParsedTable] = None) -> None:
        self.files = files
        self.codec = codec
        self.delimiter = delimiter
        self.schema = codec.schema()
        label = codec.label
        self.classes = list(label.classes) if label is not None and label.kind == "class" else []
        self.total_rows = sum(item.rows for item in files)
        self._first_rows = [item.first_row for item in files]
        self._summary = summary
        self._skipped = skipped
        self._resume: Optional[Tuple[int, int, Optional[Tuple[Chunk, int]], Iterator[Tuple[Chunk, int]]]] = None
        self._fast = True
        self._spills = parsed.spills if parsed is not None else None
        self._feature_ranks = [[(slot, ranks[column.name]) for slot, column in enumerate(codec.features)
                                if column.name in ranks] for ranks in parsed.ranks] if parsed is not None else []
        self._label_ranks = [ranks.get(label.name) if label is not None else None
                             for ranks in parsed.ranks] if parsed is not None else []
        for spill in self._spills or ():
            weakref.finalize(self, spill.remove)

    def close(self) -> None:
        """Remove the temporary files of the parsed rows (if any)."""
        for spill in self._spills or ():
            spill.remove()

    # ---- scanning -------------------------------------------------------------------
    @classmethod
    def scan(cls, src: str, options: Any) -> "CsvTableSource":
        """Read headers, infer the schema from a sample, then stream every file once (see module doc)."""
        label_name = getattr(options, "label_column", None)
        no_labels = bool(getattr(options, "no_labels", False))
        if getattr(options, "labels", None):
            raise UsageError("--labels belongs to image trees; name the target column of a CSV with --label-column")
        if no_labels and label_name:
            raise UsageError("--label-column and --no-labels contradict each other")
        if not no_labels and not label_name:
            raise UsageError(f"{src}: name the target column of the CSV rows with --label-column COLUMN, "
                             "or pass --no-labels")
        overrides = load_schema_file(getattr(options, "schema_file", None))
        files, skipped, found, delimiter = read_heads(src, normalize_delimiter(getattr(options, "delimiter", None)))
        stored, text_columns = select(files, options, label_name, overrides)
        sample_columns, sample_labels, sampled = sample(files, stored, label_name, delimiter)
        columns = [overrides.columns[name] if name in overrides.columns else
                   Column(name, "text") if name in text_columns else Column(name, infer_type(sample_columns[name]))
                   for name in stored]
        dtype = overrides.dtype or ("float64" if any(
            column.type == "int" and column.name not in overrides.columns and needs_float64(sample_columns[column.name])
            for column in columns) else "float32")
        label = label_spec(label_name, overrides, sample_labels, files[0]) if label_name else None
        codec = TabularCodec(columns, dtype, label)   # vocabularies still open where not given
        for item in files:                    # fields in the codec's order: features, then text columns
            position = {name: index for index, name in enumerate(item.head.header)}
            item.indices = [position[column.name] for column in codec.columns]
        quiet = bool(getattr(options, "quiet", False))
        parsed = None
        if codec.all_numeric:
            count_all(files, delimiter, quiet)
        else:
            parsed = parse_files(files, codec, delimiter, int(getattr(options, "workers", 1) or 1), quiet, src)
            codec = parsed.codec
        total = sum(item.rows for item in files)
        if total == 0:
            if parsed is not None:
                for spill in parsed.spills:
                    spill.remove()
            first = files[0]
            where = f"{first.name}:{first.head.header_line}" if len(files) == 1 else src
            raise EmptySourceError(f"{where}: header only, no data rows" if len(files) == 1 else
                                   f"{where}: the {len(files)} CSV files hold no data rows (header only)", path=src)
        columns = codec.columns
        summary = {"csv_files": found, "files_read": len(files), "files_skipped": len(skipped),
                   "files_without_rows": sum(1 for item in files if item.rows == 0), "rows": total,
                   "file_bytes": sum(item.size for item in files), "sample_rows": sampled,
                   "column_types": describe_columns(columns), "delimiter": delimiter}
        return cls(files, codec, delimiter, summary, skipped, parsed)

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        raise NotImplementedError("CSV rows are too many to list; the source plans its own ranges")

    def estimated_bytes(self) -> int:
        return self.total_rows * self._row_bytes()

    def _row_bytes(self) -> int:
        if not self.codec.texts:
            return self.codec.estimated_row_bytes()
        return self.codec.estimated_row_bytes(self._summary["file_bytes"] / max(1, self.total_rows))

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int],
                    sample_bytes: Optional[SampleBytes] = None) -> List[Tuple[int, int]]:
        """Consecutive row ranges of at most max_items rows and (estimated) max_bytes stored bytes."""
        step = max_items or self.total_rows
        if max_bytes is not None:
            row = self._row_bytes() + 4     # + the key "file:line": consecutive keys compress to a few bytes
            row = int(sample_bytes(np.array([row]))[0]) if sample_bytes is not None else row
            step = min(step, max(1, max_bytes // row))
        step = max(1, step)
        return [(start, min(start + step, self.total_rows)) for start in range(0, self.total_rows, step)]

    def summary(self) -> Dict[str, Any]:
        return dict(self._summary)

    def plan_skipped(self) -> List[Skipped]:
        return list(self._skipped)

    def fingerprint(self) -> str:
        record = {"kind": self.kind, "schema": self.schema.to_dict(), "classes": self.classes,
                  "delimiter": self.delimiter,
                  "files": [[item.name, item.size, item.mtime_ns, item.indices, item.label_index]
                            for item in self.files]}
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state["_resume"] = None      # open files stay in the process that opened them
        return state

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        self._fast = True
        position = start
        while position < stop:
            index = bisect.bisect_right(self._first_rows, position) - 1
            item = self.files[index]
            end = min(stop, item.first_row + item.rows)
            if self._spills is not None:
                yield from self._encode_spilled(index, position - item.first_row, end - item.first_row)
            else:
                yield from self._encode_file(index, position - item.first_row, end - position)
            position = end

    # ---- streaming rows -----------------------------------------------------------------
    def _chunks_from(self, index: int, local: int) -> Tuple[Optional[Tuple[Chunk, int]], Iterator[Tuple[Chunk, int]]]:
        """(a chunk left over by the previous range or None, the (chunk, row of its first record) stream)
        from the chunk holding row `local` of file `index` on. A range that starts where the previous
        one stopped continues the same stream (no seek; a .gz file is not decompressed again)."""
        if self._resume is not None and self._resume[:2] == (index, local):
            _, _, pending, stream = self._resume
            self._resume = None
            return pending, stream
        self._resume = None
        item = self.files[index]
        try:
            stat = os.stat(item.path)
        except OSError as exc:
            raise SourceError(f"{item.name}: cannot read ({exc.strerror or exc})", path=item.path) from None
        if (stat.st_size, stat.st_mtime_ns) != (item.size, item.mtime_ns):
            raise SourceError(f"{item.name}: changed since it was scanned; convert again", path=item.path)
        position = int(np.searchsorted(item.checkpoints[:, 0], local, side="right")) - 1
        row, offset, line = (int(value) for value in item.checkpoints[position])
        return None, stream_file(item, offset, line, row, self.delimiter)

    def _encode_file(self, index: int, local: int, count: int) -> Iterator[Outcome]:
        item = self.files[index]
        stop = local + count
        pending, stream = self._chunks_from(index, local)
        while True:
            if pending is not None:
                (chunk, first), pending = pending, None
            else:
                try:
                    chunk, first = next(stream)
                except StopIteration:
                    break
            size = len(chunk)
            if first + size <= local:
                continue
            begin, end = max(local, first) - first, min(stop, first + size) - first
            yield from self._encode_chunk(item, chunk, begin, end)
            if first + end >= stop:
                self._resume = (index, stop, (chunk, first) if end < size else None, stream)
                return
        raise SourceError(f"{item.name}: holds fewer rows than when it was scanned (changed during the "
                          "conversion?)", path=item.path)

    def _encode_chunk(self, item: CsvFile, chunk: Chunk, begin: int, end: int) -> Iterator[Outcome]:
        values = self._fast_values(item, chunk, begin, end) if self._fast else None
        matrix, labels, tails, reasons = chunk_vectors(self.codec, item, chunk, begin, end, values)
        lines = {position: chunk.line_of(begin + position) for position in reasons}
        per_row = chunk.nbytes // max(1, len(chunk))
        keys = [f"{_key_name(item)}:{chunk.line_of(position)}" for position in range(begin, end)]
        yield from _outcomes(self.codec.samples(matrix, labels, tails, reasons), item.name, lines, per_row, keys)

    def _encode_spilled(self, index: int, start: int, stop: int) -> Iterator[Outcome]:
        """Rows [start, stop) of file `index`, from the rows the scan parsed, in blocks of SPILL_BLOCK rows."""
        assert self._spills is not None
        item, spill, label_ranks = self.files[index], self._spills[index], self._label_ranks[index]
        per_row = item.size // max(1, item.rows)
        for begin in range(start, stop, SPILL_BLOCK):
            rows = spill.read(begin, min(stop, begin + SPILL_BLOCK))
            vectors = rows.vectors
            for slot, ranks in self._feature_ranks[index]:
                vectors[:, slot] = ranks[vectors[:, slot].astype(np.int64)]
            labels: Optional[np.ndarray] = rows.labels
            if label_ranks is not None:
                labels = label_ranks[rows.labels]
            elif self.codec.label is None:
                labels = None
            reasons = {position: reason for position, (_, reason) in rows.bad.items()}
            lines = {position: line for position, (line, _) in rows.bad.items()}
            name = _key_name(item)
            keys = [f"{name}:{line}" for line in rows.lines.tolist()] if rows.lines is not None else None
            yield from _outcomes(self.codec.samples(vectors, labels, rows.tails, reasons), item.name, lines, per_row,
                                 keys)

    def _fast_values(self, item: CsvFile, chunk: Chunk, begin: int, end: int) -> Optional[np.ndarray]:
        """Every field of the rows parsed by numpy's C parser, when the rows are plain numbers;
        None sends them to the exact path (which also finds and reports any bad row)."""
        if not self.codec.all_numeric or chunk.lines is None or self.delimiter not in _FAST_DELIMITERS:
            return None
        lines = chunk.lines[begin:end]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values = np.loadtxt(lines, delimiter=self.delimiter, dtype=np.float64, ndmin=2, comments=None)
        except ValueError:
            values = None
        if values is None or values.shape != (len(lines), len(item.head.header)):
            self._fast = False
            return None
        return values


def _key_name(item: CsvFile) -> str:
    """The file part of a row's key: its path relative to SRC (a single-file SRC: its name)."""
    return os.path.basename(item.path) if item.name == item.path else item.name


def _outcomes(batch: EncodedBatch, name: str, lines: Dict[int, int], per_row: int,
              keys: Optional[List[str]] = None) -> Iterator[Outcome]:
    """The batch's samples (each with its key "file:line") as one run when all rows are good, else
    row by row with a Skipped (file name, line) for each bad one."""
    samples = batch.samples
    if not batch.reasons:
        keyed = samples.with_keys(keys) if isinstance(samples, EncodedRows) else \
            [dataclasses.replace(encoded, key=key) for encoded, key in zip(samples, keys or repeat(None))]
        yield ConvertedRun(keyed, per_row * len(samples))  # type: ignore[arg-type]
        return
    for position, encoded in enumerate(samples):
        if encoded is not None:
            yield Converted(dataclasses.replace(encoded, key=keys[position] if keys else None), per_row)
        else:
            yield Skipped(name, batch.reasons[position], line=lines[position])


__all__ = ["CsvTableSource", "holds_csv_tree", "is_csv_path"]
