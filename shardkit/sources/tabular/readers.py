"""Reading a tabular file as blocks of Arrow arrays, in bounded memory.

Delimited text goes through pyarrow.csv's streaming reader (open_csv), every value read as a
string (types are decided and checked by shardkit, not by Arrow's inference) — once the types are
known, the number columns as float64 while every field of them reads as a number; rows whose number
of fields differs from the header are handed back as invalid rows, in order. JSON Lines go
through pyarrow.json's streaming reader, Parquet in batches of its row groups, Arrow IPC / Feather
record batch by record batch; their values keep their stored types.

Arrow does not say on which line a row starts, nor where among the rows an invalid one was (it
reads ahead): LineTracker finds both with Python's csv module, reading the file a second time,
and only in files that have a bad row.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ...codecs.tabular import MISSING_VALUES
from ...errors import SourceError
from .files import Head, TableFile, open_stream, read_some
from .split import open_range

#: Bytes of text Arrow parses at a time (a record must fit in one block).
BLOCK_BYTES = 1 << 20
#: Rows of a JSON Lines, Parquet or Arrow file handed over at a time.
BATCH_ROWS = 1 << 16
#: Fields of a number column that Arrow reads as null (missing): the missing spellings but those
#: it reads as NaN, which a block holding other missing values would count as missing too.
NUMERIC_NULLS = sorted(MISSING_VALUES - {"nan", "NaN", "NAN", "-nan", "-NaN"})


@dataclass
class Block:
    """Consecutive rows of a file: one array per field asked for, and the rows before and among them
    that had the wrong number of fields ((fields found, text) each; text files only)."""

    arrays: List[Any]
    invalid: List[Tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.arrays[0]) if self.arrays else 0


def _arrow_errors() -> Tuple[type, ...]:
    import pyarrow as pa
    return (OSError, EOFError, ValueError, pa.ArrowException)


def read_blocks(item: TableFile, fields: List[int], delimiter: str, batch_rows: Optional[int] = None,
                categories: Sequence[int] = (), numeric: Sequence[int] = ()) -> Iterator[Block]:
    """The blocks of one file, with the arrays of `fields` (indices into the header), in file order;
    a Parquet file's of at most `batch_rows` rows (BATCH_ROWS; the sample asks for the few rows it reads).
    categories: the positions among `fields` of category columns, which typed files hand over as
    dictionary arrays where they store them so (Parquet's dictionary pages: no string per row);
    numeric: those of number columns, which text files hand over as float64 arrays while Arrow
    reads every one of their fields as a number (no string per field; _text_blocks explains)."""
    errors = _arrow_errors()
    try:
        if item.kind == "text":
            yield from _text_blocks(item, fields, delimiter, numeric)
        else:
            names = [item.head.header[index] for index in fields]
            dictionary = [names[position] for position in categories]
            for batch in _typed_batches(item, names, batch_rows or BATCH_ROWS, dictionary):
                yield Block([batch.column(position) if position in categories else _plain(batch.column(position))
                             for position in range(len(fields))])
    except SourceError:
        raise
    except errors as exc:
        raise SourceError(f"read failed ({exc})", path=item.name) from None


def _plain(array: Any) -> Any:
    """A dictionary-encoded array as its values."""
    import pyarrow as pa
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def open_rows(item: TableFile) -> Any:
    """The (decompressed) bytes of a text file's data rows: from just after its header, or the byte
    range of one part of a split file."""
    if item.stop is not None:
        return open_range(item.path, item.head.data_offset, item.stop)
    handle = open_stream(item.path, item.max_inflation)
    _skip_to(handle, item.head.data_offset, item.name)
    return handle


def _skip_to(handle: Any, offset: int, path: str) -> None:
    """Move a (possibly compressed) stream to `offset`."""
    while offset > 0:
        data = read_some(handle, min(offset, 1 << 20), path)
        if not data:
            return
        offset -= len(data)


def _text_blocks(item: TableFile, fields: List[int], delimiter: str, numeric: Sequence[int]) -> Iterator[Block]:
    """The blocks of a text file; the fields at the positions `numeric` parsed by Arrow as numbers
    (float64, missing spellings null) while every one of them reads so, all as strings from the
    first block that does not (the blocks before it are not handed over twice)."""
    handed = rows = 0
    if numeric:
        try:
            for block in _csv_blocks(item, fields, delimiter, numeric):
                yield block
                handed, rows = handed + 1, rows + len(block)
            return
        except _NotAllNumbers:
            pass
    passed = 0
    for index, block in enumerate(_csv_blocks(item, fields, delimiter, ())):
        if index < handed:
            passed += len(block)
            continue
        if passed != rows:
            raise SourceError(f"the blocks read as strings hold {passed} rows where those read as numbers held {rows}",
                              path=item.name)
        yield block


class _NotAllNumbers(Exception):
    """A numeric field of a block that Arrow does not read as a number, or reads as NaN."""


def _holds_nan(array: Any) -> bool:
    """Whether a float64 array holds a NaN (a null is not one)."""
    if not array.null_count:
        return bool(np.isnan(array.to_numpy()).any())
    import pyarrow.compute as pc
    return bool(pc.any(pc.is_nan(array)).as_py())


def _csv_blocks(item: TableFile, fields: List[int], delimiter: str, numeric: Sequence[int]) -> Iterator[Block]:
    import pyarrow as pa
    head = item.head
    names = [f"f{index}" for index in range(len(head.header))]
    wanted = [names[index] for index in fields]
    invalid: List[Tuple[int, str]] = []

    def on_invalid(row: Any) -> str:
        invalid.append((row.actual_columns, row.text))
        return "skip"
    with open_rows(item) as handle:
        stream, reader = NoTrailingCR(handle), None
        try:
            reader = _open_csv(stream, names, wanted, delimiter, on_invalid, [wanted[position] for position in numeric])
            for batch in reader:
                found, invalid = invalid, []
                arrays = [batch.column(position) for position in range(len(wanted))]
                if any(_holds_nan(arrays[position]) for position in numeric):
                    raise _NotAllNumbers()          # "nan" reads as missing or as NaN, block by block
                yield Block(arrays, found)
        except pa.ArrowInvalid as exc:
            if "Empty CSV file" in str(exc):      # nothing after the header
                return
            if numeric:
                raise _NotAllNumbers() from None
            raise
        finally:
            _stop_reading(reader, stream)
        if invalid:
            yield Block([pa.array([], pa.string()) for _ in wanted], invalid)


def _stop_reading(reader: Any, stream: "NoTrailingCR") -> None:
    """Let Arrow's background read of a CSV stream end before its reader goes, when the blocks
    stop early (an error, a consumer that stops): its reads see the end at once, and the blocks
    read ahead are taken and dropped. A read left in flight runs on into the interpreter's exit,
    which then aborts ("terminate called without an active exception")."""
    stream.ended = True
    if reader is None:
        return
    try:
        for _ in reader:
            pass
    except Exception:  # noqa: BLE001 - the reader's own error was raised already, or is moot
        pass


class NoTrailingCR:
    """A byte stream whose reads never end with a CR while more bytes follow.

    Arrow's CSV reader takes each read as one block, and when a block ends with the CR of a
    quoted CR LF it drops the LF that starts the next block (the value comes back with a lone CR).
    Holding trailing CRs back for the next read keeps a CR LF pair in one block.
    """

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self._held = b""
        self.closed = False
        #: True once its reader is being stopped: every read is then the end of the stream.
        self.ended = False

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes (all if negative), trailing CRs kept for the next read unless at the end."""
        if self.ended:
            return b""
        wanted = size - len(self._held) if size >= 0 else -1
        data = self._held + (self._handle.read(wanted) if wanted != 0 else b"")
        body = data.rstrip(b"\r")
        self._held = data[len(body):] if body else b""
        return body if body else data

    def readable(self) -> bool:
        """Always: a stream to read."""
        return True

    def close(self) -> None:
        """Close the underlying stream."""
        self.closed = True
        self._handle.close()


def _open_csv(handle: Any, names: List[str], wanted: List[str], delimiter: str, on_invalid: Any,
              numeric: List[str]) -> Any:
    """Arrow's streaming CSV reader: every wanted field as a string, as written, but those named
    in `numeric` as float64, null where they spell a missing value (quoted or not)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv
    types = {name: pa.float64() if name in numeric else pa.string() for name in wanted}
    return pcsv.open_csv(
        handle,
        read_options=pcsv.ReadOptions(column_names=names, block_size=BLOCK_BYTES, use_threads=False),
        parse_options=pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True, invalid_row_handler=on_invalid),
        convert_options=pcsv.ConvertOptions(include_columns=wanted, column_types=types, null_values=NUMERIC_NULLS,
                                            strings_can_be_null=False, quoted_strings_can_be_null=True,
                                            check_utf8=False))


def _typed_batches(item: TableFile, names: List[str], batch_rows: int, dictionary: List[str]) -> Iterator[Any]:
    if item.kind == "parquet":
        import pyarrow.parquet as pq
        with pq.ParquetFile(item.path, read_dictionary=dictionary or None) as parquet:
            first, last = item.groups or (0, parquet.num_row_groups)
            if first < last:    # batches of batch_rows, not whole row groups: memory, and a sample reads one
                yield from parquet.iter_batches(batch_size=batch_rows, row_groups=list(range(first, last)),
                                                columns=names, use_threads=False)
        return
    with open_stream(item.path, item.max_inflation) as handle:
        for batch in open_typed(item.kind, handle, item.path):
            yield batch.select(names)


def open_typed(kind: str, handle: Any, path: str) -> Any:
    """A record batch reader over a JSON Lines or Arrow IPC (file or stream) byte stream."""
    import pyarrow as pa
    if kind == "json":
        import pyarrow.json as pjson
        return pjson.open_json(handle, read_options=pjson.ReadOptions(use_threads=False, block_size=BLOCK_BYTES))
    try:
        return _FileBatches(pa.ipc.open_file(pa.memory_map(path)))
    except pa.ArrowInvalid:
        return pa.ipc.open_stream(handle)


class _FileBatches:
    """The record batches of an Arrow IPC file, in order, like a stream reader gives them."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader
        self.schema = reader.schema

    def __iter__(self) -> Iterator[Any]:
        for index in range(self.reader.num_record_batches):
            yield self.reader.get_batch(index)


def typed_head(path: str, kind: str) -> Tuple[Head, List[Any]]:
    """The column names (as a Head) and Arrow types of a JSON Lines, Parquet or Arrow file."""
    import pyarrow as pa
    if kind == "parquet":
        import pyarrow.parquet as pq
        schema = pq.read_schema(path)
    else:
        with open_stream(path) as handle:
            schema = open_typed(kind, handle, path).schema
    types = [schema.field(index).type for index in range(len(schema))]
    if any(isinstance(kind_, pa.DictionaryType) for kind_ in types):
        types = [kind_.value_type if isinstance(kind_, pa.DictionaryType) else kind_ for kind_ in types]
    return Head(list(schema.names), 1, 0, 1, ""), types


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


__all__ = ["BATCH_ROWS", "BLOCK_BYTES", "Block", "LineTracker", "read_blocks", "typed_head"]
