"""CSV trees: one .csv / .csv.gz file, or a folder of them (recursively, sorted), one sample per row.

Opening the source reads each file's header, infers the column types from a bounded sample,
then streams every file once: it counts the rows, keeps a checkpoint (row, byte offset, line)
at each ~1 MiB chunk, and collects the vocabularies of string columns. Shards are cut by row
count; encode_range() seeks to the checkpoint before its first row and streams from there, so
memory follows the chunk and shard size, never the file size.
"""
from __future__ import annotations

import bisect
import hashlib
import json
import os
import warnings
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..codecs.tabular import Column, LabelSpec, TabularCodec
from ..errors import EmptySourceError, SourceError, UsageError
from .base import Converted, Outcome, Skipped, Source
from .csv_read import Chunk, FileProblem, Head, iter_chunks, normalize_delimiter, open_binary, read_head
from .csv_schema import (SAMPLE_ROWS, SchemaOverrides, VocabularyCollector, describe_columns, infer_label_kind,
                         infer_type, load_schema_file, needs_float64)

CSV_SUFFIXES = (".csv", ".csv.gz")
_FAST_DELIMITERS = (",", "\t", ";", "|")


def is_csv_path(path: str) -> bool:
    """Whether a file name ends in .csv or .csv.gz (any case)."""
    return path.lower().endswith(CSV_SUFFIXES)


def holds_csv_tree(root: str) -> bool:
    """Whether a folder is a CSV source: some .csv/.csv.gz file below it and no image file."""
    from ..codecs.image import image_extensions
    from .image_tree import walk_files
    images = image_extensions()
    found = False
    for rel in walk_files(root):
        if is_csv_path(rel):
            found = True
        elif os.path.splitext(rel)[1].lower() in images:
            return False
    return found


@dataclass
class CsvFile:
    """One input file: where its rows start, which fields are stored, its rows and checkpoints."""

    path: str                 # for opening
    name: str                 # for messages and skipped.jsonl (relative to a SRC folder)
    size: int
    mtime_ns: int
    head: Head
    indices: List[int] = field(default_factory=list)   # field index of each stored column
    label_index: Optional[int] = None
    rows: int = 0
    first_row: int = 0
    checkpoints: Any = None   # int64 (k, 3): row in file, byte offset, line number of a chunk start


class CsvTableSource(Source):
    """Rows of CSV files as tabular samples (see docs/csv.md)."""

    kind = "csv"

    def __init__(self, files: List[CsvFile], codec: TabularCodec, delimiter: str, summary: Dict[str, Any],
                 skipped: List[Skipped]) -> None:
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
        files, skipped, found, delimiter = _read_heads(src, normalize_delimiter(getattr(options, "delimiter", None)))
        stored, text_columns = _select(files, options, label_name, overrides)
        sample_columns, sample_labels, sampled = _sample(files, stored, label_name, delimiter)
        columns = [overrides.columns[name] if name in overrides.columns else
                   Column(name, "text") if name in text_columns else Column(name, infer_type(sample_columns[name]))
                   for name in stored]
        dtype = overrides.dtype or ("float64" if any(
            column.type == "int" and column.name not in overrides.columns and needs_float64(sample_columns[column.name])
            for column in columns) else "float32")
        label = _label_spec(label_name, overrides, sample_labels, files[0]) if label_name else None
        collector = VocabularyCollector(
            [column.name for column in columns if column.type == "category" and column.vocabulary is None]
            + ([label_name] if label is not None and label.kind == "class" and not label.classes else []))
        _stream_all(files, delimiter, collector, stored, label_name, quiet=bool(getattr(options, "quiet", False)))
        if collector:
            columns = [Column(column.name, column.type, tuple(collector.result(column.name)))
                       if column.name in collector.values else column for column in columns]
            if label is not None and label_name in collector.values:
                label = LabelSpec(label.name, "class", tuple(collector.result(label_name)))
        total = sum(item.rows for item in files)
        if total == 0:
            first = files[0]
            where = f"{first.name}:{first.head.header_line}" if len(files) == 1 else src
            raise EmptySourceError(f"{where}: header only, no data rows" if len(files) == 1 else
                                   f"{where}: the {len(files)} CSV files hold no data rows (header only)", path=src)
        codec = TabularCodec(columns, dtype, label)
        for item in files:                    # fields in the codec's order: features, then text columns
            position = {name: index for index, name in enumerate(item.head.header)}
            item.indices = [position[column.name] for column in codec.columns]
        summary = {"csv_files": found, "files_read": len(files), "files_skipped": len(skipped),
                   "files_without_rows": sum(1 for item in files if item.rows == 0), "rows": total,
                   "file_bytes": sum(item.size for item in files), "sample_rows": sampled,
                   "column_types": describe_columns(columns), "delimiter": delimiter}
        return cls(files, codec, delimiter, summary, skipped)

    # ---- Source interface -------------------------------------------------------------
    def item_sizes(self) -> np.ndarray:
        raise NotImplementedError("CSV rows are too many to list; the source plans its own ranges")

    def estimated_bytes(self) -> int:
        return self.total_rows * self._row_bytes()

    def _row_bytes(self) -> int:
        if not self.codec.texts:
            return self.codec.estimated_row_bytes()
        return self.codec.estimated_row_bytes(self._summary["file_bytes"] / max(1, self.total_rows))

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int]) -> List[Tuple[int, int]]:
        """Consecutive row ranges of at most max_items rows and (estimated) max_bytes stored bytes."""
        step = max_items or self.total_rows
        if max_bytes is not None:
            step = min(step, max(1, max_bytes // self._row_bytes()))
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
        return None, _stream(item, offset, line, row, self.delimiter)

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
        count = end - begin
        per_row = chunk.nbytes // max(1, len(chunk))
        values = self._fast_values(item, chunk, begin, end) if self._fast else None
        reasons: Dict[int, str] = {}
        if values is not None:
            columns: List[Any] = [values[:, position] for position in item.indices]
            labels: Any = values[:, item.label_index] if item.label_index is not None else None
            good = count
        else:
            rows = chunk.rows[begin:end]
            fields = len(item.head.header)
            for position, row in enumerate(rows):
                if row is None:
                    reasons[position] = chunk.errors.get(begin + position, "unreadable record")
                elif len(row) != fields:
                    reasons[position] = f"row has {len(row)} fields, the header has {fields}"
            if reasons:
                rows = [row for position, row in enumerate(rows) if position not in reasons]
            good = len(rows)
            table = list(zip(*rows)) if rows else [()] * fields
            columns = [table[position] for position in item.indices]
            labels = table[item.label_index] if item.label_index is not None else None
        batch = self.codec.encode(columns, labels, good)
        samples = iter(range(good))
        for position in range(count):
            if position in reasons:
                reason = reasons[position]
            else:
                slot = next(samples)
                sample = batch.samples[slot]
                if sample is not None:
                    yield Converted(sample, per_row)
                    continue
                reason = batch.reasons[slot]
            yield Skipped(item.name, reason, line=chunk.line_of(begin + position))

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


def _stream(item: CsvFile, offset: int, line: int, row: int, delimiter: str,
            count_only: bool = False) -> Iterator[Tuple[Chunk, int]]:
    with open_binary(item.path) as handle:
        try:
            handle.seek(offset)
        except (OSError, EOFError) as exc:
            raise SourceError(f"{item.name}: cannot seek ({exc})", path=item.path) from None
        for chunk in iter_chunks(handle, item.name, offset, line, delimiter, count_only=count_only):
            yield chunk, row
            row += len(chunk)


# ---- scan helpers ---------------------------------------------------------------------
def _locate(src: str) -> Tuple[List[Tuple[str, str]], bool]:
    """(path to open, name for messages) of each CSV file of SRC, sorted; and whether SRC is one file."""
    if os.path.isfile(src):
        return [(src, src)], True
    from .image_tree import walk_files
    rels = sorted((rel for rel in walk_files(src) if is_csv_path(rel)), key=lambda rel: tuple(rel.split("/")))
    return [(os.path.join(src, rel), rel) for rel in rels], False


def _read_heads(src: str, delimiter: Optional[str]) -> Tuple[List[CsvFile], List[Skipped], int, str]:
    located, single = _locate(src)
    files: List[CsvFile] = []
    skipped: List[Skipped] = []
    for path, name in located:
        try:
            stat = os.stat(path)
            head = read_head(path, delimiter)
        except OSError as exc:
            problem = FileProblem(f"cannot read ({exc.strerror or exc})")
        except FileProblem as exc:
            problem = exc
        else:
            delimiter = head.delimiter
            files.append(CsvFile(path, name, stat.st_size, stat.st_mtime_ns, _named(head, name)))
            continue
        if single:
            where = f"{name}:{problem.line}" if problem.line is not None else name
            raise SourceError(f"{where}: {problem.reason}", path=path)
        skipped.append(Skipped(name, problem.reason, line=problem.line))
    if not files:
        first = f" (first: {skipped[0].message()})" if skipped else ""
        raise EmptySourceError(f"{src}: no readable .csv or .csv.gz file{first}", path=src)
    return files, skipped, len(located), delimiter or ","


def _named(head: Head, name: str) -> Head:
    """The header with empty names replaced by column_<i>; duplicate names refused."""
    names = [value if value else f"column_{index}" for index, value in enumerate(head.header)]
    seen = set()
    for value in names:
        if value in seen:
            raise SourceError(f"{name}:{head.header_line}: column name {value!r} appears twice in the header",
                              path=name)
        seen.add(value)
    return Head(names, head.header_line, head.data_offset, head.data_line, head.delimiter)


def _select(files: List[CsvFile], options: Any, label_name: Optional[str],
            overrides: SchemaOverrides) -> Tuple[List[str], List[str]]:
    """The stored column names (in order) and the text ones; sets each file's field indices."""
    first = files[0]
    chosen = list(getattr(options, "columns", None) or [])
    if not chosen:
        for item in files[1:]:
            if item.head.header != first.head.header:
                raise SourceError(f"{item.name}: header differs from {first.name} ({_difference(first, item)}); "
                                  "pick the columns they share with --columns, or convert them separately",
                                  path=item.path)
        chosen = list(first.head.header)
    if len(set(chosen)) != len(chosen):
        raise UsageError("--columns names a column twice")
    stored = [name for name in chosen if name != label_name]
    if not stored:
        raise UsageError(f"{first.name}: no feature column left besides the label column {label_name!r}")
    text_columns = list(getattr(options, "text_columns", None) or [])
    for name in text_columns:
        if name == label_name:
            raise UsageError(f"--text-columns: {name!r} is the label column")
        if name not in stored:
            raise UsageError(f"--text-columns: {name!r} is not a stored column (columns: {', '.join(stored)})")
    known = set(first.head.header)
    for name in overrides.columns:
        if name not in known:
            raise UsageError(f"--schema names column {name!r}, which {first.name} does not have")
    for item in files:
        header = item.head.header
        for name in stored + ([label_name] if label_name else []):
            if name not in header:
                what = "label column" if name == label_name else "column"
                raise UsageError(f"{item.name}: no {what} {name!r} (columns: {_listing(header)})", path=item.path)
        position = {name: index for index, name in enumerate(header)}
        item.indices = [position[name] for name in stored]
        item.label_index = position[label_name] if label_name else None
    return stored, text_columns


def _difference(first: CsvFile, other: CsvFile) -> str:
    a, b = first.head.header, other.head.header
    for index, (left, right) in enumerate(zip(a, b)):
        if left != right:
            return f"column {index + 1} is {right!r} there, {left!r} in {first.name}"
    return f"{len(b)} columns there, {len(a)} in {first.name}"


def _listing(names: List[str]) -> str:
    return ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")


def _sample(files: List[CsvFile], stored: List[str], label_name: Optional[str],
            delimiter: str) -> Tuple[Dict[str, List[str]], List[str], int]:
    """Values of the first SAMPLE_ROWS well-formed rows, per stored column, and the labels."""
    columns: Dict[str, List[str]] = {name: [] for name in stored}
    labels: List[str] = []
    taken = 0
    for item in files:
        fields = len(item.head.header)
        for chunk, _ in _stream(item, item.head.data_offset, item.head.data_line, 0, delimiter):
            rows = [row for row in chunk.rows if row is not None and len(row) == fields][:SAMPLE_ROWS - taken]
            if rows:
                table = list(zip(*rows))
                for name, position in zip(stored, item.indices):
                    columns[name].extend(table[position])
                if item.label_index is not None:
                    labels.extend(table[item.label_index])
                taken += len(rows)
            if taken >= SAMPLE_ROWS:
                return columns, labels, taken
    return columns, labels, taken


def _label_spec(name: str, overrides: SchemaOverrides, sample: List[str], first: CsvFile) -> LabelSpec:
    if overrides.classes is not None:
        return LabelSpec(name, "class", tuple(overrides.classes))
    declared = overrides.columns.get(name)
    if declared is not None:
        if declared.type == "category":
            return LabelSpec(name, "class", tuple(declared.vocabulary or ()))
        if declared.type == "int":
            return LabelSpec(name, "int")
        raise UsageError(f"--schema: label column {name!r} must be int or category, not {declared.type}")
    return LabelSpec(name, infer_label_kind(name, sample, first.name))


def _stream_all(files: List[CsvFile], delimiter: str, collector: VocabularyCollector, stored: List[str],
                label_name: Optional[str], quiet: bool) -> None:
    """Count every file's rows, record its checkpoints and collect vocabularies."""
    from ..progress import Progress
    targets = [name for name in collector.values]
    first_row = 0
    with Progress(sum(item.size for item in files), "scan csv", quiet=quiet, unit="B") as bar:
        for item in files:
            fields = len(item.head.header)
            position = {name: index for name, index in zip(stored, item.indices)}
            if label_name is not None and item.label_index is not None:
                position[label_name] = item.label_index
            getters = [(name, itemgetter(position[name])) for name in targets]
            checkpoints: List[Tuple[int, int, int]] = []
            rows = 0
            plain = not item.path.lower().endswith(".gz")
            done = 0
            for chunk, _ in _stream(item, item.head.data_offset, item.head.data_line, 0, delimiter,
                                    count_only=not getters):
                checkpoints.append((rows, chunk.offset, chunk.first_line))
                if getters:
                    good = [row for row in chunk.rows if row is not None and len(row) == fields]
                    for name, getter in getters:
                        collector.update(name, map(getter, good), f"{item.name}:{chunk.first_line}")
                rows += len(chunk)
                if plain:
                    bar.advance(chunk.nbytes, chunk.nbytes)
                    done += chunk.nbytes
            bar.advance(max(0, item.size - done), 0)
            item.rows, item.first_row = rows, first_row
            item.checkpoints = np.asarray(checkpoints or [(0, item.head.data_offset, item.head.data_line)],
                                          dtype=np.int64).reshape(-1, 3)
            first_row += rows
