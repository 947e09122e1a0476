"""Reading a tabular file as blocks of Arrow arrays, in bounded memory.

Delimited text goes through pyarrow.csv's streaming reader (open_csv), every value read as a
string (types are decided and checked by shardkit, not by Arrow's inference) — once the types are
known, the number columns as float64 while every field of them reads as a number; rows whose number
of fields differs from the header are handed back as invalid rows, in order. JSON Lines go
through pyarrow.json's streaming reader, Parquet in batches of its row groups, Arrow IPC / Feather
record batch by record batch; their values keep their stored types.

Arrow does not say on which line a row starts, nor where among the rows an invalid one was (it
reads ahead). The streams Arrow reads count their line ends (LineCount): a file whose every record
is one line needs nothing more; lines.py finds the lines of the others, and of files with a bad
row, reading them a second time.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ...codecs.tabular import MISSING_VALUES
from ...errors import SourceError
from .files import Head, TableFile, open_stream, pin, read_some
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
                categories: Sequence[int] = (), numeric: Sequence[int] = (),
                lines: Optional["LineCount"] = None) -> Iterator[Block]:
    """The blocks of one file, with the arrays of `fields` (indices into the header), in file order;
    a Parquet file's of at most `batch_rows` rows (BATCH_ROWS; the sample asks for the few rows it reads).
    categories: the positions among `fields` of category columns, which typed files hand over as
    dictionary arrays where they store them so (Parquet's dictionary pages: no string per row);
    numeric: those of number columns, which text files hand over as float64 arrays while Arrow
    reads every one of their fields as a number (no string per field; _text_blocks explains);
    lines: given, it holds the line ends of the (text or JSON) file once every block was read."""
    errors = _arrow_errors()
    try:
        if item.kind == "text":
            yield from _text_blocks(item, fields, delimiter, numeric, lines)
        else:
            for batch in _typed_batches(item, fields, batch_rows or BATCH_ROWS, categories, lines):
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
    with pin(item) as name:
        if item.stop is not None:
            return open_range(name, item.head.data_offset, item.stop)
        handle = open_stream(item.path, item.max_inflation, via=name)
    _skip_to(handle, item.head.data_offset, item.name)
    return handle


def _skip_to(handle: Any, offset: int, path: str) -> None:
    """Move a (possibly compressed) stream to `offset`."""
    while offset > 0:
        data = read_some(handle, min(offset, 1 << 20), path)
        if not data:
            return
        offset -= len(data)


def _text_blocks(item: TableFile, fields: List[int], delimiter: str, numeric: Sequence[int],
                 lines: Optional["LineCount"]) -> Iterator[Block]:
    """The blocks of a text file; the fields at the positions `numeric` parsed by Arrow as numbers
    (float64, missing spellings null) while every one of them reads so, all as strings from the
    first block that does not (the blocks before it are not handed over twice)."""
    handed = rows = 0
    if numeric:
        try:
            for block in _csv_blocks(item, fields, delimiter, numeric, lines):
                yield block
                handed, rows = handed + 1, rows + len(block)
            return
        except _NotAllNumbers:
            pass
    passed = 0
    for index, block in enumerate(_csv_blocks(item, fields, delimiter, (), lines)):
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


def _csv_blocks(item: TableFile, fields: List[int], delimiter: str, numeric: Sequence[int],
                lines: Optional["LineCount"] = None) -> Iterator[Block]:
    import pyarrow as pa
    head = item.head
    names = [f"f{index}" for index in range(len(head.header))]
    wanted = [names[index] for index in fields]
    invalid: List[Tuple[int, str]] = []

    def on_invalid(row: Any) -> str:
        invalid.append((row.actual_columns, row.text))
        return "skip"
    with open_rows(item) as handle:
        stream, reader = NoTrailingCR(handle, LineCount()), None
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
                if lines is not None:
                    lines.take(stream.count)
                return
            if numeric:
                raise _NotAllNumbers() from None
            raise
        finally:
            _stop_reading(reader, stream)
        if lines is not None:
            lines.take(stream.count)
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


class LineCount:
    """The line ends of the bytes read from a stream: LF, CR and CR LF (a CR LF is never split
    between two reads: NoTrailingCR holds a trailing CR back), and whether the bytes end with one."""

    def __init__(self) -> None:
        self.newlines = self.crs = self.crlfs = 0
        self.ends_line = True

    def add(self, data: bytes) -> None:
        """Count the line ends of the next bytes read."""
        if data:
            self.newlines += data.count(b"\n")
            self.crs += data.count(b"\r")
            self.crlfs += data.count(b"\r\n")
            self.ends_line = data.endswith((b"\n", b"\r"))

    def take(self, other: "LineCount") -> None:
        """Hold what another count found (the stream that was read to its end)."""
        self.newlines, self.crs, self.crlfs, self.ends_line = other.newlines, other.crs, other.crlfs, other.ends_line

    def one_per_line(self, records: int, lone_cr_ends: bool = True) -> bool:
        """Whether `records` records (blank lines are none) fill these bytes one line each, so that
        record i starts on the i-th line: as many line ends as records (the last may have none).
        lone_cr_ends: a CR alone ends a line (delimited text, read with Python's csv module)."""
        if lone_cr_ends and self.crs != self.crlfs:
            return False
        return self.newlines == records or (self.newlines == records - 1 and not self.ends_line)


class _Counted:
    """A byte stream whose reads are counted into a LineCount (JSON Lines)."""

    def __init__(self, handle: Any, count: "LineCount") -> None:
        self._handle, self.count, self.closed = handle, count, False

    def read(self, size: int = -1) -> bytes:
        data = self._handle.read(size)
        self.count.add(data)
        return data  # type: ignore[no-any-return]

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self.closed = True
        self._handle.close()


class NoTrailingCR:
    """A byte stream whose reads never end with a CR while more bytes follow.

    Arrow's CSV reader takes each read as one block, and when a block ends with the CR of a
    quoted CR LF it drops the LF that starts the next block (the value comes back with a lone CR).
    Holding trailing CRs back for the next read keeps a CR LF pair in one block.
    """

    def __init__(self, handle: Any, count: Optional["LineCount"] = None) -> None:
        self._handle = handle
        self.count = count if count is not None else LineCount()
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
        given = body if body else data
        self.count.add(given)
        return given

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


def _typed_batches(item: TableFile, fields: List[int], batch_rows: int, categories: Sequence[int],
                   lines: Optional[LineCount] = None) -> Iterator[Any]:
    """Record batches of the columns `fields` (indices into the file's own columns: the header shown
    names an unnamed column column_<i>, which the file does not), those at the positions
    `categories` dictionary-encoded where the file stores them so."""
    if item.kind == "parquet":
        import pyarrow.parquet as pq
        with pin(item) as name:
            names = pq.read_schema(name).names
            columns = [names[index] for index in fields]
            dictionary = [columns[position] for position in categories]
            parquet = pq.ParquetFile(name, read_dictionary=dictionary or None)
        with parquet:
            first, last = item.groups or (0, parquet.num_row_groups)
            if first < last:    # batches of batch_rows, not whole row groups: memory, and a sample reads one
                yield from parquet.iter_batches(batch_size=batch_rows, row_groups=list(range(first, last)),
                                                columns=columns, use_threads=False)
        return
    with pin(item) as name:
        handle = open_stream(item.path, item.max_inflation, via=name)
    with handle:
        stream = _Counted(handle, LineCount()) if item.kind == "json" else handle
        with pin(item) as name:
            batches = open_typed(item.kind, stream, name)
        for batch in batches:
            yield batch.select(fields)
        if lines is not None and isinstance(stream, _Counted):
            lines.take(stream.count)


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


def typed_head(path: str, kind: str, via: Optional[str] = None) -> Tuple[Head, List[Any]]:
    """The column names (as a Head) and Arrow types of a JSON Lines, Parquet or Arrow file (opened
    by the name `via` when given: a Pinned one)."""
    import pyarrow as pa
    if kind == "parquet":
        import pyarrow.parquet as pq
        schema = pq.read_schema(via or path)
    else:
        with open_stream(path, via=via) as handle:
            schema = open_typed(kind, handle, via or path).schema
    types = [schema.field(index).type for index in range(len(schema))]
    if any(isinstance(kind_, pa.DictionaryType) for kind_ in types):
        types = [kind_.value_type if isinstance(kind_, pa.DictionaryType) else kind_ for kind_ in types]
    return Head(list(schema.names), 1, 0, 1, ""), types


__all__ = ["BATCH_ROWS", "BLOCK_BYTES", "Block", "LineCount", "open_rows", "read_blocks", "typed_head"]
