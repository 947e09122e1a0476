"""Scanning a tabular source: find the files, read their headers, pick the columns, and sample
the first rows to infer the column types."""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ...codecs.tabular import LabelSpec
from ...errors import EmptySourceError, SampleError, SourceError, UsageError
from ...options import TabularOptions
from ..base import Skipped
from ..tree import Pinned
from .files import FileProblem, Head, Located, TableFile, file_kind, locate, read_head, split_suffix
from .readers import read_blocks, typed_head
from .types import SAMPLE_ROWS, SchemaOverrides, infer_label_kind
from .values import as_text, strings


def read_heads(src: str, delimiter: Optional[str]) -> Tuple[List[TableFile], List[Skipped], Located, str]:
    """The readable files of SRC with their headers (unreadable ones, and links out of a SRC folder,
    skipped; an error for a single file), what was found, and the delimiter of the text files."""
    found = locate(src)
    single = found.single
    files: List[TableFile] = []
    skipped = [Skipped(link.path, link.reason()) for link in found.links_out]
    root = None if single else os.path.realpath(src)
    for path, name in found.files:
        kind = file_kind(path) or "text"
        try:
            with Pinned(path, root) as via:         # the file read here is the one every later open reads
                stat = os.stat(via)
                if kind == "text":
                    head = read_head(path, delimiter or ("\t" if split_suffix(path)[0] == ".tsv" else None), via)
                    types = None
                else:
                    head, types = typed_head(path, kind, via)
        except OSError as exc:
            problem = FileProblem(f"cannot read ({exc.strerror or exc})")
        except (FileProblem, SampleError) as exc:
            problem = exc if isinstance(exc, FileProblem) else FileProblem(str(exc))
        except Exception as exc:          # Arrow's own errors on a damaged Parquet / Arrow / JSON file
            problem = FileProblem(f"cannot read ({exc})")
        else:
            delimiter = delimiter or (head.delimiter if kind == "text" else None)
            files.append(TableFile(path, name, stat.st_size, stat.st_mtime_ns, kind, _named(head, name),
                                   types=types, identity=(stat.st_dev, stat.st_ino), root=root))
            continue
        if single:
            raise SourceError(problem.reason, path=name, line=problem.line)
        skipped.append(Skipped(name, problem.reason, line=problem.line))
    skipped.sort(key=lambda item: item.path.split("/"))
    if not files:
        first = f" (first: {skipped[0].message()})" if skipped else ""
        raise EmptySourceError(f"no readable table file{first}", path=src)
    return files, skipped, found, delimiter or ","


def _named(head: Head, name: str) -> Head:
    """The header with empty names replaced by column_<i>; duplicate names refused."""
    names = [value if value else f"column_{index}" for index, value in enumerate(head.header)]
    seen = set()
    for value in names:
        if value in seen:
            raise SourceError(f"column name {value!r} appears twice in the header", path=name,
                              line=head.header_line)
        seen.add(value)
    return Head(names, head.header_line, head.data_offset, head.data_line, head.delimiter)


def select(files: List[TableFile], options: TabularOptions, label_name: Optional[str],
           overrides: SchemaOverrides) -> Tuple[List[str], List[str]]:
    """The stored column names (in order) and the text ones; sets each file's field indices."""
    first = files[0]
    chosen = list(options.columns or [])
    if not chosen:
        for item in files[1:]:
            if item.head.header != first.head.header:
                raise SourceError(f"header differs from {first.name} ({_difference(first, item)}); "
                                  "pick the columns they share with --columns, or convert them separately",
                                  path=item.name)
        chosen = _without(list(first.head.header), column_names(options.drop_columns), label_name, first.name)
    if len(set(chosen)) != len(chosen):
        raise UsageError("--columns names a column twice")
    stored = [name for name in chosen if name != label_name]
    if not stored:
        raise UsageError(f"no feature column left besides the label column {label_name!r}", path=first.name)
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
                raise UsageError(f"no {what} {name!r} (columns: {_listing(header)})", path=item.name)
        position = {name: index for index, name in enumerate(header)}
        item.indices = [position[name] for name in stored]
        item.label_index = position[label_name] if label_name else None
    return stored, text_columns


def column_names(value: Union[None, str, Sequence[str]]) -> List[str]:
    """Column names given as a list, or as one comma-separated string ("a,b")."""
    if value is None:
        return []
    parts = value.split(",") if isinstance(value, str) else list(value)
    return [name.strip() for name in parts if name.strip()]


def _without(header: List[str], dropped: List[str], label_name: Optional[str], where: str) -> List[str]:
    """The header's columns less those --drop-columns names (each must be a column, not the label)."""
    for name in dropped:
        if name == label_name:
            raise UsageError(f"--drop-columns: {name!r} is the label column")
        if name not in header:
            raise UsageError(f"--drop-columns: no column {name!r} (columns: {_listing(header)})", path=where)
    return [name for name in header if name not in dropped]


def _difference(first: TableFile, other: TableFile) -> str:
    a, b = first.head.header, other.head.header
    for index, (left, right) in enumerate(zip(a, b)):
        if left != right:
            return f"column {index + 1} is {right!r} there, {left!r} in {first.name}"
    return f"{len(b)} columns there, {len(a)} in {first.name}"


def _listing(names: List[str]) -> str:
    return ", ".join(names[:20]) + (" ..." if len(names) > 20 else "")


def sample(files: List[TableFile], stored: List[str], label_name: Optional[str],
           delimiter: str) -> Tuple[Dict[str, Any], List[str], int]:
    """The first SAMPLE_ROWS rows (with the header's number of fields): an Arrow array per stored
    column, and the labels as strings."""
    import pyarrow as pa
    pieces: List[List[Any]] = [[] for _ in range(len(stored) + (1 if label_name else 0))]
    taken = 0
    for item in files:
        fields = item.indices + ([item.label_index] if item.label_index is not None else [])
        for block in read_blocks(item, fields, delimiter, SAMPLE_ROWS - taken):
            wanted = min(len(block), SAMPLE_ROWS - taken)
            for found, array in zip(pieces, block.arrays):
                found.append(array.slice(0, wanted))
            taken += wanted
            if taken >= SAMPLE_ROWS:
                break
        if taken >= SAMPLE_ROWS:
            break
    arrays = [pa.concat_arrays(_same_type(found)) if found else pa.array([], pa.string()) for found in pieces]
    labels = strings(arrays[-1]) if label_name else []
    return dict(zip(stored, arrays)), labels, taken


def _same_type(arrays: List[Any]) -> List[Any]:
    """Arrays of one column from several files, as strings where their types differ."""
    if len({str(array.type) for array in arrays}) <= 1:
        return arrays
    import pyarrow as pa
    return [as_text(array).cast(pa.string()) for array in arrays]


def label_spec(name: str, overrides: SchemaOverrides, sample: List[str], first: TableFile) -> LabelSpec:
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
