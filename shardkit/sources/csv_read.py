"""Reading CSV files as chunks of whole records, with line numbers, in bounded memory.

Record boundaries follow Python's csv module (RFC 4180 quoting: quoted fields may hold the
delimiter, quotes doubled, and newlines), with lines split on LF only: CRLF files are fine, a
lone CR outside quotes makes its row bad. A chunk is about READ_SIZE bytes of complete lines;
a quoted record running past a chunk is carried into the next one. Quote-free chunks take a
fast path (plain splitting) that gives exactly what the csv module would.
"""
from __future__ import annotations

import csv
import gzip
import re
from dataclasses import dataclass, field
from typing import BinaryIO, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import SourceError

READ_SIZE = 1 << 20
#: A record (one row, quoted newlines included) longer than this is refused: an unbalanced quote.
MAX_RECORD_BYTES = 64 << 20
#: Bytes looked at for the header, the delimiter and binary content.
HEAD_BYTES = 64 << 10
BOM = b"\xef\xbb\xbf"
QUOTE = '"'
DELIMITERS = (",", "\t", ";", "|")
_SENTINEL = "x\n"
_SURROGATE = re.compile("[\udc80-\udcff]")


def is_gzip(path: str) -> bool:
    """Whether a CSV path is gzip-compressed (by its .gz suffix)."""
    return path.lower().endswith(".gz")


def open_binary(path: str) -> BinaryIO:
    """The file's (decompressed) byte stream; SourceError if it cannot be opened."""
    try:
        return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")  # type: ignore[return-value]
    except OSError as exc:
        raise SourceError(f"{path}: cannot open ({exc.strerror or exc})", path=path) from None


def read_block(handle: BinaryIO, size: int, path: str) -> bytes:
    """handle.read(size), turning gzip and I/O failures into a SourceError naming the file."""
    try:
        return handle.read(size)
    except (OSError, EOFError, ValueError) as exc:
        raise SourceError(f"{path}: read failed ({exc})", path=path) from None


@dataclass
class Chunk:
    """Complete records of consecutive lines. rows[i] is None for a record that could not be split
    (errors[i] says why); blank lines are not records. Quote-free chunks keep their lines and
    split them only when asked (the numeric fast path parses the lines directly)."""

    offset: int                           # byte offset of the chunk in the (decompressed) stream
    first_line: int                       # 1-based line number of its first line
    nbytes: int                           # bytes of its records
    delimiter: str
    lines: Optional[List[str]] = None     # quote-free chunks: one line per record
    parsed: Optional[List[Optional[List[str]]]] = None
    starts: Optional[List[int]] = None    # line index of each record (None: record i is line i)
    errors: Dict[int, str] = field(default_factory=dict)
    count: Optional[int] = None           # counted-only chunks (scan): records, neither lines nor rows

    def __len__(self) -> int:
        if self.count is not None:
            return self.count
        return len(self.lines) if self.parsed is None else len(self.parsed)  # type: ignore[arg-type]

    @property
    def rows(self) -> List[Optional[List[str]]]:
        """The fields of every record (None for a bad one)."""
        if self.parsed is None:
            delimiter = self.delimiter
            self.parsed = [line.split(delimiter) for line in self.lines or ()]
        return self.parsed

    def line_of(self, index: int) -> int:
        """1-based line number where record `index` starts."""
        return self.first_line + (index if self.starts is None else self.starts[index])


Rows = List[Optional[List[str]]]


def split_records(text: str, delimiter: str,
                  final: bool) -> Tuple[Optional[List[str]], Optional[Rows], Optional[List[int]], int, Dict[int, str]]:
    """Records of complete lines: (plain lines or None, parsed rows or None, start line indexes,
    lines consumed, errors). Exactly one of the first two is set.

    Lines consumed is less than the lines given when the last record continues past them
    (a quoted newline) and the text is not the end of the file (final=False).
    """
    plain = QUOTE not in text
    if plain and "\r" in text:
        text = text.replace("\r\n", "\n")           # CR inside quoted fields is data: only plain text
        plain = "\r" not in text
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if plain:
        if "" in lines:
            starts = [index for index, line in enumerate(lines) if line]
            return [lines[index] for index in starts], None, starts, len(lines), {}
        return lines, None, None, len(lines), {}
    rows, starts, consumed, errors = _split_quoted(lines, delimiter, final)
    return None, rows, starts, consumed, errors


SplitResult = Tuple[Rows, Optional[List[int]], int, Dict[int, str]]


def _split_quoted(lines: List[str], delimiter: str, final: bool) -> SplitResult:
    count = len(lines)
    feed = [line + "\n" for line in lines]
    feed.append(_SENTINEL)
    reader = csv.reader(feed, delimiter=delimiter, quotechar=QUOTE, doublequote=True, strict=False)
    try:
        rows: Rows = list(reader)             # the common case at C speed: every record complete and good
    except csv.Error:
        rows = []
    if rows and rows[-1] == ["x"] and reader.line_num == count + 1 and [] not in rows:
        rows.pop()
        if len(rows) == count:
            return rows, None, count, {}
    return _split_quoted_slowly(feed, count, delimiter, final)


def _split_quoted_slowly(feed: List[str], count: int, delimiter: str,
                         final: bool) -> Tuple[Rows, List[int], int, Dict[int, str]]:
    """Record by record, with each record's first line; finds bad and unfinished records."""
    reader = csv.reader(feed, delimiter=delimiter, quotechar=QUOTE, doublequote=True, strict=False)
    rows: List[Optional[List[str]]] = []
    starts: List[int] = []
    errors: Dict[int, str] = {}
    previous = 0
    consumed = count
    while previous < count:
        try:
            row: Optional[List[str]] = next(reader)
            error = None
        except StopIteration:
            break
        except csv.Error as exc:
            row, error = None, f"malformed CSV ({exc})"
        end = reader.line_num
        if end > count:                         # the record ran into the sentinel: not complete here
            if not final:
                consumed = previous
                break
            row, error = None, "quoted field not closed before the end of the file"
            end = count
        if error is not None:
            errors[len(rows)] = error
            rows.append(None)
            starts.append(previous)
        elif row:
            rows.append(row)
            starts.append(previous)
        previous = end
    return rows, starts, consumed, errors


def all_complete(rows: Rows, fields: int) -> bool:
    """Whether every record was split and has `fields` fields (checked at C speed)."""
    return None not in rows and set(map(len, rows)) <= {fields}  # type: ignore[arg-type]


def check_fields(chunk: Chunk) -> None:
    """Mark records holding NUL bytes or invalid UTF-8 (decoded as surrogates) as bad."""
    rows = chunk.rows
    for index, row in enumerate(rows):
        if row is None:
            continue
        joined = "\x1f".join(row)
        if "\x00" in joined:
            chunk.errors[index] = "contains a NUL byte (binary data in a text file)"
            rows[index] = None
        elif _SURROGATE.search(joined):
            chunk.errors[index] = "not valid UTF-8 text"
            rows[index] = None
    chunk.lines = None


def count_plain(data: bytes) -> Optional[Tuple[int, int]]:
    """(records, lines) of quote-free, CR-free data, counted without decoding; None otherwise."""
    if b'"' in data or b"\r" in data:
        return None
    lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1)
    blank = int(data.startswith(b"\n"))
    if b"\n\n" in data:
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        blank += int(np.count_nonzero(np.diff(newlines) == 1))
    return lines - blank, lines


def parse_chunk(data: bytes, offset: int, first_line: int, delimiter: str, final: bool,
                count_only: bool = False) -> Tuple[Chunk, int, int]:
    """(chunk of the complete records in data, bytes and lines they take). data holds whole lines.
    count_only: plain data is only counted (the scan's row count needs no fields)."""
    if count_only:
        counted = count_plain(data)
        if counted is not None:
            return Chunk(offset, first_line, len(data), delimiter, count=counted[0]), len(data), counted[1]
    try:
        text = data.decode("utf-8")
        dirty = False
    except UnicodeDecodeError:
        text = data.decode("utf-8", "surrogateescape")
        dirty = True
    lines, rows, starts, consumed_lines, errors = split_records(text, delimiter, final)
    if rows is None or final or consumed_lines >= _count_lines(text):
        nbytes = len(data)
    else:
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
        nbytes = int(newlines[consumed_lines - 1]) + 1 if consumed_lines else 0
    chunk = Chunk(offset, first_line, nbytes, delimiter, lines, rows, starts, errors)
    if dirty or "\x00" in text:
        check_fields(chunk)
    return chunk, nbytes, consumed_lines


def _count_lines(text: str) -> int:
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def iter_chunks(handle: BinaryIO, path: str, offset: int, first_line: int, delimiter: str,
                read_size: int = READ_SIZE, count_only: bool = False) -> Iterator[Chunk]:
    """Chunks of whole records from the handle's current position (byte offset `offset`) to EOF."""
    pending = b""
    while True:
        data = read_block(handle, read_size, path)
        final = not data
        buffer = pending + data if pending else data
        if not buffer:
            return
        cut = len(buffer) if final else buffer.rfind(b"\n") + 1
        if cut == 0:
            _check_record_size(len(buffer), path, first_line)
            pending = buffer
            continue
        chunk, used, lines = parse_chunk(buffer[:cut] if cut < len(buffer) else buffer, offset, first_line,
                                         delimiter, final, count_only)
        if len(chunk):
            yield chunk
        first_line += lines
        offset += used
        pending = buffer[used:]
        _check_record_size(len(pending), path, first_line)
        if final:
            return


def _check_record_size(size: int, path: str, line: int) -> None:
    if size > MAX_RECORD_BYTES:
        raise SourceError(f"{path}:{line}: a record runs over {MAX_RECORD_BYTES >> 20} MiB "
                          "(a quote that is never closed?)", path=path)


# ---- the head of a file: header, dialect, problems --------------------------------------------
@dataclass(frozen=True)
class Head:
    """What a file's first bytes say: its header and where the data rows start."""

    header: List[str]
    header_line: int
    data_offset: int      # byte offset (decompressed) just after the header record
    data_line: int        # line number of the first line after the header
    delimiter: str


class FileProblem(Exception):
    """A whole file cannot be read as CSV (empty, binary, ...): (message without the path, line)."""

    def __init__(self, reason: str, line: Optional[int] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def read_head(path: str, delimiter: Optional[str]) -> Head:
    """Header and dialect of a CSV file; FileProblem for an empty, binary or CR-only file."""
    try:
        with open_binary(path) as handle:
            data = read_block(handle, HEAD_BYTES, path)
            while data and b"\n" not in data and len(data) < MAX_RECORD_BYTES:
                more = read_block(handle, HEAD_BYTES, path)
                if not more:
                    break
                data += more
    except SourceError as exc:
        raise FileProblem(str(exc).replace(f"{path}: ", "", 1)) from None
    start = len(BOM) if data.startswith(BOM) else 0
    if not data[start:].strip():
        raise FileProblem("empty file (no header line)", 1)
    first_end = data.find(b"\n")
    first_end = len(data) if first_end < 0 else first_end
    try:
        data[start:first_end].decode("utf-8")
        header_text = True
    except UnicodeDecodeError:
        header_text = False
    nul = data.find(b"\x00")
    if nul >= 0 and (nul < first_end or not header_text):
        raise FileProblem("binary content (NUL bytes), not a CSV text file", data.count(b"\n", 0, nul) + 1)
    if not header_text:
        raise FileProblem("not UTF-8 text (binary, or another encoding)", 1)
    if b"\n" not in data and b"\r" in data:
        raise FileProblem("lines end with CR only (old Mac style); convert it to LF or CRLF line endings", 1)
    cut = len(data) if b"\n" not in data else data.rfind(b"\n") + 1
    text = data[start:cut].decode("utf-8", "surrogateescape")
    if delimiter is None:
        delimiter = sniff_delimiter(text)
    lines, rows, starts, consumed, errors = split_records(text, delimiter, final=len(data) < HEAD_BYTES)
    if rows is None:
        rows = [line.split(delimiter) for line in lines or ()]
    starts = starts if starts is not None else list(range(len(rows)))
    if not rows or rows[0] is None or starts[0] >= consumed:
        reason = errors.get(0, "the header record does not end within the first lines")
        raise FileProblem(f"cannot read the header ({reason})", 1 + (starts[0] if starts else 0))
    header_end = starts[1] if len(rows) > 1 else consumed
    lines = text.split("\n")
    data_offset = min(len(data), start + len("\n".join(lines[:header_end]).encode("utf-8")) + 1)
    return Head(header=list(rows[0]), header_line=starts[0] + 1, data_offset=data_offset,
                data_line=header_end + 1, delimiter=delimiter)


def sniff_delimiter(text: str) -> str:
    """The delimiter among , TAB ; | that splits the first lines into the same number (>1) of fields."""
    sample = "\n".join(text.split("\n")[:50])
    best, best_fields = ",", 1
    for candidate in DELIMITERS:
        lines, rows, _, _, _ = split_records(sample, candidate, final=True)
        counts = [len(row) for row in rows if row is not None] if rows is not None else \
            [line.count(candidate) + 1 for line in lines or ()]
        if not counts or counts[0] < 2:
            continue
        if all(count == counts[0] for count in counts):
            return candidate
        if counts[0] > best_fields:
            best, best_fields = candidate, counts[0]
    return best


def normalize_delimiter(value: Optional[str]) -> Optional[str]:
    """--delimiter as given: one character; 'tab' and '\\t' mean TAB."""
    if value is None:
        return None
    if value.lower() in ("tab", "\\t"):
        return "\t"
    if len(value) != 1 or value in ('"', "\n", "\r"):
        from ..errors import UsageError
        raise UsageError(f"--delimiter must be one character other than a quote or newline, not {value!r}")
    return value


__all__ = ["BOM", "Chunk", "FileProblem", "Head", "iter_chunks", "normalize_delimiter", "open_binary",
           "parse_chunk", "read_head", "sniff_delimiter", "split_records", "all_complete"]
