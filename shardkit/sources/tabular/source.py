"""Tables: one file or a folder of them (recursively, sorted), one sample per row.

Opening the source reads each file's header, infers the column types from the first rows, then
parses every file once with Arrow (parse.py), collecting the category vocabularies and writing
the parsed rows to temporary files (spill.py). Shards are cut by row count; encode_range()
reads its rows back and turns the provisional category ids into codes of the sorted
vocabularies. Memory follows the block and shard size, never the file size.
"""
from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
import os
import weakref
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ...codecs.tabular import Column, EncodedBatch, TabularCodec
from ...errors import ConversionError, EmptySourceError, UsageError
from ...options import RunOptions, TabularOptions
from ...records import EncodedRows, KeyRun
from ..base import Converted, ConvertedRun, Outcome, SampleBytes, Skipped, Source
from ..tree import extension_counts
from .files import (Located, TableFile, check_inflation, holds_table_tree, is_table_path, normalize_decimal,
                    normalize_delimiter)
from .onto import Bases, check_column_types, recorded_columns, recorded_encoding
from .parse import ParsedTable, parse_files
from .scan import label_spec, read_heads, sample, select
from .types import (SchemaOverrides, check_scalar, describe_columns, infer_type, load_schema_file, mostly_numbers,
                    needs_float64)

#: Rows read back from the spill at a time.
SPILL_BLOCK = 1 << 16


class TabularSource(Source):
    """Rows of tables as tabular samples (see docs/tables.md)."""

    kind = "csv"
    default_order = "source"     # why: docs/tables.md, "Row order"
    options_class = TabularOptions

    def __init__(self, files: List[TableFile], codec: TabularCodec, delimiter: str, summary: Dict[str, Any],
                 skipped: List[Skipped], parsed: ParsedTable) -> None:
        self.files = files
        self.codec = codec
        self.delimiter = delimiter
        self.schema = codec.schema()
        label = codec.label
        self.classes = list(label.classes) if label is not None and label.kind == "class" else []
        self.total_rows = self._all_rows = sum(item.rows for item in files)
        self._kept: Optional[np.ndarray] = None      # restrict(): the rows an append converts
        self.parts = parsed.parts
        self._first_rows = [part.first_row for part in self.parts]
        per_row = {item.path: item.size // max(1, item.rows) for item in files}
        self._per_row = [per_row[part.path] for part in self.parts]
        self._summary = summary
        self._skipped = skipped
        self._spills = parsed.spills
        self._feature_ranks = [[(slot, ranks[column.name]) for slot, column in enumerate(codec.features)
                                if column.name in ranks] for ranks in parsed.ranks]
        self._label_ranks = [ranks.get(label.name) if label is not None else None for ranks in parsed.ranks]
        for spill in self._spills:
            weakref.finalize(self, spill.remove)

    def close(self) -> None:
        """Remove the temporary files of the parsed rows (if any)."""
        for spill in self._spills:
            spill.remove()

    # ---- scanning -------------------------------------------------------------------
    @classmethod
    def claims(cls, src: str, source_options: Dict[str, Any]) -> bool:
        if os.path.isfile(src):
            return is_table_path(src)
        return not source_options.get("labels") and holds_table_tree(src)

    @classmethod
    def open(cls, src: str, options: TabularOptions, run: RunOptions, onto: Any = None) -> "TabularSource":
        """Read headers, infer the schema from a sample, then parse every file once (see module doc);
        onto: the Manifest of a dataset the rows join, whose recorded encoding they take (onto.py)."""
        label_name = options.label_column
        if not options.no_labels and not label_name:
            raise UsageError("name the target column of the CSV rows with --label-column COLUMN, "
                             "or pass --no-labels", path=src)
        overrides = load_schema_file(options.schema_file)
        bases: Bases = {}
        if onto is not None:
            overrides, bases = recorded_encoding(onto, overrides)
        given = normalize_delimiter(options.delimiter)
        files, skipped, found, delimiter = read_heads(src, given)
        decimal = normalize_decimal(options.decimal, delimiter if any(
            item.kind == "text" for item in files) else None)
        for item in files:
            item.decimal = decimal if item.kind == "text" else None
            item.max_inflation = check_inflation(options.max_inflation)
        stored, text_columns = select(files, options, label_name, overrides if onto is None else SchemaOverrides())
        if onto is not None:
            stored = recorded_columns(stored, onto, files)
            check_column_types(files, list(overrides.columns.values()))
        for item in files:
            for name, stored_type in zip(item.head.header, item.types or ()):
                if name in stored or name == label_name:
                    check_scalar(name, stored_type, item.name)
        sample_columns, sample_labels, sampled = sample(files, stored, label_name, delimiter)
        first = files[0]
        arrow_types = dict(zip(first.head.header, first.types or ()))
        columns = [overrides.columns[name] if name in overrides.columns else
                   Column(name, "text") if name in text_columns else
                   Column(name, infer_type(sample_columns[name], arrow_types.get(name), decimal))
                   for name in stored]
        warnings = [warning for warning in (mostly_numbers(column.name, sample_columns[column.name], decimal,
                                                           first.name if len(files) == 1 else src)
                                            for column in columns if column.type == "category"
                                            and column.name not in overrides.columns) if warning]
        dtype = overrides.dtype or ("float64" if any(
            column.type == "int" and column.name not in overrides.columns and needs_float64(sample_columns[column.name])
            for column in columns) else "float32")
        label = label_spec(label_name, overrides, sample_labels, files[0]) if label_name else None
        codec = TabularCodec(columns, dtype, label)   # vocabularies still open where not given
        for item in files:                    # fields in the codec's order: features, then text columns
            position = {name: index for index, name in enumerate(item.head.header)}
            item.indices = [position[column.name] for column in codec.columns]
        parsed = parse_files(files, codec, delimiter, run.workers, run.quiet, src, bases)
        _refuse_empty(files, parsed, src)
        where = first.name if len(files) == 1 else src
        warnings += [row_index_warning(where, name, start, per_file) for name, (start, per_file)
                     in parsed.row_indices.items()] + parsed.grown
        summary = _scan_summary(files, skipped, found, sampled, parsed.codec, delimiter)
        if decimal is not None:
            summary["decimal"] = decimal
        if warnings:
            summary["warnings"] = warnings
        return cls(files, parsed.codec, delimiter, summary, skipped, parsed)

    @classmethod
    def open_onto(cls, src: str, options: TabularOptions, run: RunOptions, onto: Any) -> "TabularSource":
        return cls.open(src, options, run, onto)

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        raise NotImplementedError("CSV rows are too many to list; the source plans its own ranges")

    def estimated_bytes(self) -> int:
        return self.total_rows * self._row_bytes()

    def _row_bytes(self) -> int:
        if not self.codec.texts:
            return self.codec.estimated_row_bytes()
        return self.codec.estimated_row_bytes(self._summary["file_bytes"] / max(1, self._all_rows))

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int],
                    order: Optional[np.ndarray] = None,
                    sample_bytes: Optional[SampleBytes] = None) -> List[Tuple[int, int]]:
        """Consecutive ranges of at most max_items rows and (estimated) max_bytes stored bytes;
        every row has the same estimated size, so the cut is the same in any order."""
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
        if "decimal" in self._summary:
            record["decimal"] = self._summary["decimal"]
        return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()

    # ---- appending (writing/append.py): a row is an input, its key "file:line" ----------
    def item_keys(self) -> Optional[List[str]]:
        return [key for index, part in enumerate(self.parts) for key in self._keys(index, 0, part.rows)]

    def held_items(self, manifest: Any) -> Optional[np.ndarray]:
        """The rows of files whose name the dataset's rows carry in their keys (None: not recorded)."""
        names = [manifest.source.get("summary", {}).get("table_files")] + \
            [append.get("table_files") for append in manifest.source.get("appended", [])]
        if any(found is None for found in names):
            return None
        held = {name for found in names for name in found}
        rows = [np.arange(part.first_row, part.first_row + part.rows, dtype=np.int64) for part in self.parts
                if _key_name(part) in held]
        return np.concatenate(rows) if rows else np.empty(0, dtype=np.int64)

    def restrict(self, items: np.ndarray, classes: List[str]) -> None:
        """Keep only these rows (ascending); their labels are already the dataset's (open_onto)."""
        if list(classes) != self.classes:
            raise ConversionError(f"the table's classes {self.classes} are not the dataset's {list(classes)}")
        self._kept = np.asarray(items, dtype=np.int64)
        self.total_rows = len(self._kept)

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        if self._kept is None:
            yield from self._encode_rows(start, stop)
            return
        rows = self._kept[start:stop]
        for run in np.split(rows, np.flatnonzero(np.diff(rows) != 1) + 1) if len(rows) else []:
            yield from self._encode_rows(int(run[0]), int(run[-1]) + 1)

    def _keys(self, index: int, begin: int, count: int, lines: Optional[np.ndarray] = None) -> KeyRun:
        """The keys "file:line" of rows [begin, begin + count) of part `index` (lines: theirs, when irregular)."""
        part = self.parts[index]
        if lines is None and self._spills[index].has_lines:
            lines = self._spills[index].read(begin, begin + count).lines
        return KeyRun(f"{_key_name(part)}:", part.head.data_line + begin, count, lines)

    def _encode_rows(self, start: int, stop: int) -> Iterator[Outcome]:
        position = start
        while position < stop:
            index = bisect.bisect_right(self._first_rows, position) - 1
            item = self.parts[index]
            end = min(stop, item.first_row + item.rows)
            yield from self._encode_spilled(index, position - item.first_row, end - item.first_row)
            position = end

    def _encode_spilled(self, index: int, start: int, stop: int) -> Iterator[Outcome]:
        """Rows [start, stop) of part `index`, from the rows the scan parsed, in blocks of SPILL_BLOCK rows."""
        item, spill, label_ranks = self.parts[index], self._spills[index], self._label_ranks[index]
        per_row = self._per_row[index]
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
            keys = self._keys(index, begin, len(vectors), rows.lines)
            lines = {position: keys.number(position) for position in rows.bad}
            yield from _outcomes(self.codec.samples(vectors, labels, rows.tails, reasons), item.name, lines, per_row,
                                 keys)


def _refuse_empty(files: List[TableFile], parsed: ParsedTable, src: str) -> None:
    """EmptySourceError (the parsed rows removed) when no file holds a data row."""
    if sum(item.rows for item in files):
        return
    for spill in parsed.spills:
        spill.remove()
    first = files[0]
    if len(files) == 1:
        raise EmptySourceError("header only, no data rows", path=first.name, line=first.head.header_line)
    raise EmptySourceError(f"the {len(files)} files hold no data rows (header only)", path=src)


def _scan_summary(files: List[TableFile], skipped: List[Skipped], found: Located, sampled: int,
                  codec: TabularCodec, delimiter: str) -> Dict[str, Any]:
    """What the scan found, for the manifest's source summary."""
    return {"csv_files": len(found.files), "files_read": len(files), "files_skipped": len(skipped),
            "files_without_rows": sum(1 for item in files if item.rows == 0),
            "rows": sum(item.rows for item in files), "file_bytes": sum(item.size for item in files),
            "sample_rows": sampled, "column_types": describe_columns(codec.columns), "delimiter": delimiter,
            "other_files": len(found.other_files), "other_files_by_extension": extension_counts(found.other_files),
            "links_outside_src": len(found.links_out),
            "table_files": sorted({_key_name(item) for item in files if item.rows})}


def row_index_warning(where: str, name: str, start: int, per_file: bool) -> str:
    """The warning about a column that only numbers the rows (row_index.py), saying how to drop it."""
    numbers = f"{start}..{'n-1' if start == 0 else 'n'}{' in each file' if per_file else ''}"
    return (f"{where}: column {name!r} holds the row numbers ({numbers}), a feature that tells where a row sits, "
            f"not what it is; leave it out with --drop-columns {name} (Python: drop_columns=[{name!r}])")


def _key_name(item: TableFile) -> str:
    """The file part of a row's key: its path relative to SRC (a single-file SRC: its name)."""
    return os.path.basename(item.path) if item.name == item.path else item.name


def _outcomes(batch: EncodedBatch, name: str, lines: Dict[int, int], per_row: int,
              keys: KeyRun) -> Iterator[Outcome]:
    """The batch's samples (each with its key "file:line") as one run when all rows are good, else
    row by row with a Skipped (file name, line) for each bad one."""
    samples = batch.samples
    if not batch.reasons:
        keyed = samples.with_keys(keys) if isinstance(samples, EncodedRows) else \
            [dataclasses.replace(encoded, key=key) for encoded, key in zip(samples, keys)]
        yield ConvertedRun(keyed, per_row * len(samples))  # type: ignore[arg-type]
        return
    for position, encoded in enumerate(samples):
        if encoded is not None:
            yield Converted(dataclasses.replace(encoded, key=keys[position]), per_row)
        else:
            yield Skipped(name, batch.reasons[position], line=lines[position])


__all__ = ["SPILL_BLOCK", "TabularSource"]
