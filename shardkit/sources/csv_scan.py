"""Scanning a CSV source: find the files, read their headers, pick and type the columns, sample,
then stream every file once to count rows and keep checkpoints (and hand chunks on)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..codecs.tabular import LabelSpec
from ..errors import EmptySourceError, SourceError, UsageError
from ..options import TabularOptions
from .base import Skipped
from .csv_read import Chunk, FileProblem, Head, iter_chunks, open_binary, read_head
from .csv_schema import SAMPLE_ROWS, SchemaOverrides, infer_label_kind

CSV_SUFFIXES = (".csv", ".csv.gz")


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


def stream_file(item: CsvFile, offset: int, line: int, row: int, delimiter: str,
                count_only: bool = False) -> Iterator[Tuple[Chunk, int]]:
    with open_binary(item.path) as handle:
        try:
            handle.seek(offset)
        except (OSError, EOFError) as exc:
            raise SourceError(f"{item.name}: cannot seek ({exc})", path=item.path) from None
        for chunk in iter_chunks(handle, item.name, offset, line, delimiter, count_only=count_only):
            yield chunk, row
            row += len(chunk)


def _locate(src: str) -> Tuple[List[Tuple[str, str]], bool]:
    """(path to open, name for messages) of each CSV file of SRC, sorted; and whether SRC is one file."""
    if os.path.isfile(src):
        return [(src, src)], True
    from .image_tree import walk_files
    rels = sorted((rel for rel in walk_files(src) if is_csv_path(rel)), key=lambda rel: tuple(rel.split("/")))
    return [(os.path.join(src, rel), rel) for rel in rels], False


def read_heads(src: str, delimiter: Optional[str]) -> Tuple[List[CsvFile], List[Skipped], int, str]:
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


def select(files: List[CsvFile], options: TabularOptions, label_name: Optional[str],
           overrides: SchemaOverrides) -> Tuple[List[str], List[str]]:
    """The stored column names (in order) and the text ones; sets each file's field indices."""
    first = files[0]
    chosen = list(options.columns or [])
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
    text_columns = list(options.text_columns or [])
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


def sample(files: List[CsvFile], stored: List[str], label_name: Optional[str],
           delimiter: str) -> Tuple[Dict[str, List[str]], List[str], int]:
    """Values of the first SAMPLE_ROWS well-formed rows, per stored column, and the labels."""
    columns: Dict[str, List[str]] = {name: [] for name in stored}
    labels: List[str] = []
    taken = 0
    for item in files:
        fields = len(item.head.header)
        for chunk, _ in stream_file(item, item.head.data_offset, item.head.data_line, 0, delimiter):
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


def label_spec(name: str, overrides: SchemaOverrides, sample: List[str], first: CsvFile) -> LabelSpec:
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


def scan_file(item: CsvFile, delimiter: str, on_chunk: Optional[Callable[[Chunk], None]] = None,
              advance: Callable[[int, int], None] = lambda items, nbytes: None) -> Tuple[int, np.ndarray]:
    """(rows, checkpoints) of one file: records counted, a checkpoint (row, byte offset, line) per
    chunk. With on_chunk every chunk is split into records and handed over; without it,
    quote-free chunks are only counted. advance(bytes, bytes) follows the reading."""
    checkpoints: List[Tuple[int, int, int]] = []
    rows = 0
    plain = not item.path.lower().endswith(".gz")
    done = 0
    for chunk, _ in stream_file(item, item.head.data_offset, item.head.data_line, 0, delimiter,
                                count_only=on_chunk is None):
        checkpoints.append((rows, chunk.offset, chunk.first_line))
        if on_chunk is not None:
            on_chunk(chunk)
        rows += len(chunk)
        if plain:
            advance(chunk.nbytes, chunk.nbytes)
            done += chunk.nbytes
    advance(max(0, item.size - done), 0)
    return rows, np.asarray(checkpoints or [(0, item.head.data_offset, item.head.data_line)],
                            dtype=np.int64).reshape(-1, 3)


def count_all(files: List[CsvFile], delimiter: str, quiet: bool) -> None:
    """Count every file's rows and record its checkpoints (tables whose rows the shards parse)."""
    from ..progress import Progress
    first_row = 0
    with Progress(sum(item.size for item in files), "scan csv", quiet=quiet, unit="B") as bar:
        for item in files:
            item.rows, item.checkpoints = scan_file(item, delimiter, advance=bar.advance)
            item.first_row = first_row
            first_row += item.rows
