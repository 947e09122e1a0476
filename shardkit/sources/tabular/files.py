"""The files of a tabular source: which names count, in what order, and the head of a text file.

A file's kind follows its name: delimited text (.csv, .tsv), JSON Lines (.jsonl, .ndjson) —
either plain or compressed (.gz, .bz2, .zst) — Parquet (.parquet, .pq) and Arrow IPC / Feather
(.arrow, .feather, .ipc). The head of a delimited text file (header, delimiter, where the data
starts, and whole-file problems such as binary content) is read here, in Python, from its first
bytes; the rows themselves are parsed by Arrow (readers.py).
"""
from __future__ import annotations

import csv
import io
import os
import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO, List, Optional, Tuple

from ...errors import SampleError, SourceError, UsageError
from ..tree import LinkOut, Pinned

TEXT_SUFFIXES = (".csv", ".tsv")
JSON_SUFFIXES = (".jsonl", ".ndjson")
COMPRESSIONS = {".gz": "gzip", ".bz2": "bz2", ".zst": "zstd", ".zstd": "zstd"}
PARQUET_SUFFIXES = (".parquet", ".pq")
ARROW_SUFFIXES = (".arrow", ".feather", ".ipc")
#: Bytes looked at for the header, the delimiter and binary content.
HEAD_BYTES = 64 << 10
#: A header longer than this is refused (a quote that is never closed).
MAX_HEADER_BYTES = 64 << 20
#: A compressed file may inflate to this many times its size (--max-inflation; 0: no limit) ...
MAX_INFLATION = 200.0
#: ... and always to this many bytes (a small file of repeated values inflates far).
MIN_INFLATED_BYTES = 256 << 20
BOM = b"\xef\xbb\xbf"
DELIMITERS = (",", "\t", ";", "|")
_LINE_END = re.compile(r"\r\n|\r|\n")


def split_suffix(path: str) -> Tuple[str, Optional[str]]:
    """(the name's kind suffix, its compression or None): 'x.csv.gz' -> ('.csv', 'gzip')."""
    base, suffix = os.path.splitext(path.lower())
    if suffix in COMPRESSIONS:
        return os.path.splitext(base)[1], COMPRESSIONS[suffix]
    return suffix, None


def file_kind(path: str) -> Optional[str]:
    """'text' | 'json' | 'parquet' | 'arrow' for a tabular file name, None for any other file."""
    suffix, compression = split_suffix(path)
    if suffix in TEXT_SUFFIXES:
        return "text"
    if suffix in JSON_SUFFIXES:
        return "json"
    if compression is None and suffix in PARQUET_SUFFIXES:
        return "parquet"
    if compression is None and suffix in ARROW_SUFFIXES:
        return "arrow"
    return None


def is_table_path(path: str) -> bool:
    """Whether a file name is one of the tabular kinds."""
    return file_kind(path) is not None


def holds_table_tree(root: str) -> bool:
    """Whether a folder is a tabular source: some tabular file below it and no image file."""
    from ...codecs.pillow import image_extensions
    from ..tree import walk_files
    images = image_extensions()
    found = False
    for rel in walk_files(root):
        if is_table_path(rel):
            found = True
        elif os.path.splitext(rel)[1].lower() in images:
            return False
    return found


@dataclass
class Located:
    """The tabular files of SRC and what else it holds."""

    files: List[Tuple[str, str]]    # (path to open, name for messages), sorted
    single: bool                    # SRC is one file
    other_files: List[str] = field(default_factory=list)    # files of a SRC folder that are no table
    links_out: List[LinkOut] = field(default_factory=list)  # links out of a SRC folder to a table or a folder


def locate(src: str) -> Located:
    """The tabular files of SRC: SRC itself, or those below the folder SRC (links that lead out
    of it not followed: see sources/tree.py)."""
    if os.path.isfile(src):
        return Located([(src, src)], True)
    from ..tree import walk_files
    links_out: List[LinkOut] = []
    found = list(walk_files(src, links_out))
    rels = sorted((rel for rel in found if is_table_path(rel)), key=lambda rel: tuple(rel.split("/")))
    return Located([(os.path.join(src, rel), rel) for rel in rels], False,
                   [rel for rel in found if not is_table_path(rel)],
                   [link for link in links_out if link.folder or is_table_path(link.path)])


def open_stream(path: str, max_inflation: float = MAX_INFLATION, via: Optional[str] = None) -> BinaryIO:
    """The file's decompressed byte stream (Arrow's codecs: gzip, bz2, zstd); a compressed file's
    stream fails once it inflates beyond max_inflation times the file's size (0: no limit).
    via: the name to open it by (a Pinned one); path names it and its compression."""
    import pyarrow as pa
    compression = split_suffix(path)[1]
    try:
        stream = pa.input_stream(via or path, compression=compression)
        size = os.path.getsize(via or path)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"cannot open ({getattr(exc, 'strerror', None) or exc})", path=path) from None
    if compression is None or not max_inflation:
        return stream  # type: ignore[return-value]
    return _Inflation(stream, path, size, max_inflation)  # type: ignore[return-value]


class _Inflation(io.RawIOBase):
    """A decompressed stream that counts its bytes and stops a decompression bomb before it fills
    TMPDIR and DST: at most max(ratio x compressed size, MIN_INFLATED_BYTES) bytes."""

    def __init__(self, stream: Any, path: str, size: int, ratio: float) -> None:
        super().__init__()
        self._stream, self._path, self._size, self._ratio = stream, path, size, ratio
        self._limit = max(MIN_INFLATED_BYTES, int(ratio * size))
        self._count = 0

    def readable(self) -> bool:
        return True

    def read1(self, size: int = -1) -> bytes:
        """Up to `size` bytes, as read() (each read asks the codec for no more than it is asked)."""
        return self.read(size)  # type: ignore[no-any-return]

    def readinto(self, buffer: Any) -> int:
        data = self._stream.read(len(buffer))
        self._count += len(data)
        if self._count > self._limit:
            raise SourceError(f"inflates to more than {self._limit:,} bytes, over {self._ratio:g} "
                              f"times its {self._size:,} compressed bytes (a decompression bomb?); "
                              "--max-inflation N allows N times, 0 any size", path=self._path)
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


def read_some(handle: BinaryIO, size: int, path: str) -> bytes:
    """handle.read(size), turning decompression and I/O failures into a SourceError naming the file."""
    import pyarrow as pa
    try:
        return handle.read(size)
    except (OSError, EOFError, ValueError, pa.ArrowException) as exc:
        raise SourceError(f"read failed ({exc})", path=path) from None


@dataclass(frozen=True)
class Head:
    """What a text file's first bytes say: its header and where the data rows start."""

    header: List[str]
    header_line: int
    data_offset: int      # byte offset (decompressed) just after the header record
    data_line: int        # line number of the first line after the header
    delimiter: str


@dataclass
class TableFile:
    """One input file: its kind, header, which fields are stored, and its rows once parsed."""

    path: str                 # for opening
    name: str                 # for messages and skipped.jsonl (relative to a SRC folder)
    size: int
    mtime_ns: int
    kind: str
    head: Head
    indices: List[int] = field(default_factory=list)   # field index of each stored column
    label_index: Optional[int] = None
    rows: int = 0
    first_row: int = 0
    types: Any = None         # the Arrow type of each field (binary kinds), None for text files
    decimal: Optional[str] = None   # --decimal: the decimal mark of numbers in text files, when not "."
    max_inflation: float = MAX_INFLATION   # --max-inflation: of a compressed file (0: no limit)
    stop: Optional[int] = None      # a part of a split text file: where it ends (it starts at head.data_offset)
    groups: Optional[Tuple[int, int]] = None    # a part of a Parquet file: its row groups [first, last)
    identity: Optional[Tuple[int, int]] = None  # (st_dev, st_ino) of the file the scan read
    root: Optional[str] = None      # the real path of the SRC folder it lies in (None: SRC is the file)


def pin(item: TableFile) -> Pinned:
    """A name that opens the file the scan read, checked to lie inside SRC (sources/tree.py): every
    later open of a table file goes through it, so a link swapped in meanwhile is not followed."""
    try:
        return Pinned(item.path, item.root, item.identity)
    except SampleError as exc:
        raise SourceError(str(exc), path=item.name) from None
    except OSError as exc:
        raise SourceError(f"cannot open ({exc.strerror or exc})", path=item.name) from None


class FileProblem(Exception):
    """A whole file cannot be read (empty, binary, ...): (message without the path, line)."""

    def __init__(self, reason: str, line: Optional[int] = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def read_head(path: str, delimiter: Optional[str], via: Optional[str] = None) -> Head:
    """Header and dialect of a delimited text file; FileProblem for an empty, binary or CR-only file.
    via: the name to open it by (a Pinned one)."""
    try:
        with open_stream(path, via=via) as handle:
            data = read_some(handle, HEAD_BYTES, path)
            while data and b"\n" not in data and len(data) < MAX_HEADER_BYTES:
                more = read_some(handle, HEAD_BYTES, path)
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
    text = data[start:].decode("utf-8", "surrogateescape")
    if delimiter is None:
        delimiter = sniff_delimiter(text)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=False)
    header: List[str] = []
    lines_before = 0
    try:
        while not header:
            lines_before = reader.line_num
            header = next(reader)
    except (StopIteration, csv.Error) as exc:
        raise FileProblem(f"cannot read the header ({exc or 'it does not end within the first lines'})", 1) \
            from None
    ends = [match.end() for match in _LINE_END.finditer(text)]
    if reader.line_num > len(ends) and len(data) >= HEAD_BYTES:
        raise FileProblem("cannot read the header (it does not end within the first lines)", 1)
    used = ends[reader.line_num - 1] if reader.line_num <= len(ends) else len(text)
    return Head(header=list(header), header_line=lines_before + 1,
                data_offset=start + len(text[:used].encode("utf-8", "surrogateescape")),
                data_line=reader.line_num + 1, delimiter=delimiter)


def sniff_delimiter(text: str) -> str:
    """The delimiter among , TAB ; | that splits the first lines into the same number (>1) of fields."""
    sample = "\n".join(_LINE_END.split(text)[:50])
    best, best_fields = ",", 1
    for candidate in DELIMITERS:
        try:
            counts = [len(row) for row in csv.reader(io.StringIO(sample), delimiter=candidate, strict=False) if row]
        except csv.Error:
            continue
        if len(counts) > 1 and not sample.endswith("\n"):
            counts.pop()                     # the last line may be cut short
        if not counts or counts[0] < 2:
            continue
        if all(count == counts[0] for count in counts):
            return candidate
        if counts[0] > best_fields:
            best, best_fields = candidate, counts[0]
    return best


def check_inflation(value: Optional[float]) -> float:
    """--max-inflation as given (MAX_INFLATION when omitted); a negative ratio is a usage error."""
    if value is None:
        return MAX_INFLATION
    if value < 0:
        raise UsageError(f"--max-inflation must be 0 (no limit) or a positive ratio, not {value:g}")
    return float(value)


def normalize_decimal(value: Optional[str], delimiter: Optional[str]) -> Optional[str]:
    """--decimal as given: "." (the default, None) or ","; it cannot be the delimiter."""
    if value in (None, "."):
        return None
    if value != ",":
        raise UsageError(f"--decimal must be '.' or ',', not {value!r}")
    if delimiter == ",":
        raise UsageError("--decimal , needs another delimiter than ',' (e.g. --delimiter ';')")
    return value


def normalize_delimiter(value: Optional[str]) -> Optional[str]:
    """--delimiter as given: one character; 'tab' and '\\t' mean TAB."""
    if value is None:
        return None
    if value.lower() in ("tab", "\\t"):
        return "\t"
    if len(value) != 1 or value in ('"', "\n", "\r"):
        raise UsageError(f"--delimiter must be one character other than a quote or newline, not {value!r}")
    return value


__all__ = ["FileProblem", "Head", "TableFile", "file_kind", "holds_table_tree", "is_table_path", "locate",
           "normalize_decimal", "normalize_delimiter", "open_stream", "read_head", "read_some", "sniff_delimiter"]
