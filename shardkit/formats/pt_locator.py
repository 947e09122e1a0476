"""The locator of a .pt shard (format version 3): where each tensor's bytes lie in the file.

A shard is the zip archive torch.save writes (pt_archive); the writer then stores the locator as
the archive's comment (zip readers, torch's included, skip it), so a reader finds it with one pread
of the file's tail and maps the tensors without torch's weights-only unpickler (most of a ~7 ms
open, paid again by every fresh DataLoader worker for every shard). formats/pt.md is the byte-level contract.

The locator is untrusted: `parse` checks its CRC32, its fields' types, that every range lies in
the archive before its end record and that no two overlap; `meta_crc32` (every byte outside the
ranges: zip headers, the pickle) tells whether the archive is still the one the writer described.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import sys
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from ..errors import CorruptShardError
from .locating import gaps_crc32, range_problem

MAGIC = b"SHKPTLOC"
VERSION = 1
#: The tensors, in the order torch.save stores them (storage keys 0, 1, ...), and their element sizes.
TENSORS = (("data", 1), ("offsets", 8), ("raw_lengths", 8), ("labels", 8), ("crc32", 8), ("keys", 1),
           ("key_blocks", 8))
#: file size, metadata CRC32, CRC32 of the JSON and the fields before it, JSON length, magic
_TRAILER = struct.Struct("<QIII8s")
_END = struct.Struct("<4s4H2IH")            # zip end-of-central-directory record
_END_SIGNATURE = b"PK\x05\x06"
#: A shard up to this size is read whole at once: its locator and every byte `describes` checks.
FIRST_READ = 16 << 10
#: Largest locator JSON (a zip comment holds at most 65,535 bytes).
MAX_JSON = 65535 - _TRAILER.size


@dataclass
class PTLocator:
    """What a reader needs to map a .pt shard's tensors (offsets from the file's start)."""

    fields: Dict[str, Any]              # plain fields: format_version, layout, dtype, shape, compression, ...
    tables: Dict[str, Tuple[int, int]]  # tensor name -> (offset, bytes)
    file_size: int = 0
    meta_crc32: int = 0
    #: The file as `located` read and checked it (locating.FileView), for reads of its ranges.
    view: Any = field(default=None, repr=False, compare=False)

    @property
    def count(self) -> int:
        return int(self.fields["num_samples"])

    @property
    def dataset_id(self) -> str:
        return str(self.fields["dataset_id"])

    def encode(self) -> bytes:
        text = json.dumps({"fields": self.fields, "tables": self.tables}, sort_keys=True,
                          separators=(",", ":")).encode("utf-8")
        head = struct.pack("<QI", self.file_size, self.meta_crc32)
        return text + _TRAILER.pack(self.file_size, self.meta_crc32, zlib.crc32(head + text), len(text), MAGIC)

    def archive_end(self, comment: int) -> int:
        """Where the archive's end record begins (the locator is its comment, `comment` bytes)."""
        return self.file_size - comment - _END.size


def seal(path: str, fields: Dict[str, Any], nbytes: Dict[str, int]) -> None:
    """Append the locator to the .pt archive just written at path (as its comment).
    Nothing is appended when the archive is not laid out as expected (a later torch): the shard
    then opens through torch.load, as version 2 did."""
    tables = _tensor_ranges(path, nbytes)
    if tables is None or sys.byteorder != "little":
        return
    text_size = len(PTLocator(fields, tables).encode()) - _TRAILER.size
    comment = text_size + _TRAILER.size
    with open(path, "r+b") as handle:
        # Mapped, not read: only the archive's own records outside the tensors are looked at, so
        # sealing a shard does not hold a copy of it.
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            size = len(data)
            end = _END.unpack_from(data, size - _END.size)
            if end[0] != _END_SIGNATURE or end[-1] != 0 or comment > 65535 \
                    or max(begin + nbytes for begin, nbytes in tables.values()) > size - _END.size:
                return
            length = struct.pack("<H", comment)     # the comment length, the archive's last 2 bytes
            locator = PTLocator(fields, tables, file_size=size + comment)
            locator.meta_crc32 = zlib.crc32(length, gaps_crc32(data, tables.values(), 0, size - 2))
        encoded = locator.encode()
        assert len(encoded) == comment
        handle.seek(size - 2)
        handle.write(length + encoded)


def _tensor_ranges(path: str, nbytes: Dict[str, int]) -> Optional[Dict[str, Tuple[int, int]]]:
    """(offset, bytes) of each tensor's zip entry, in torch.save's storage-key order; None when the
    entries are not the expected ones."""
    with zipfile.ZipFile(path) as archive, open(path, "rb") as raw:
        entries = {}
        for info in archive.infolist():
            folder, _, storage = info.filename.rpartition("/data/")
            if folder and storage.isdigit():
                raw.seek(info.header_offset)
                header = raw.read(30)
                name_length, extra_length = struct.unpack_from("<HH", header, 26)
                begin = info.header_offset + 30 + name_length + extra_length
                entries[int(storage)] = (begin, info.file_size, info.compress_type)
    if sorted(entries) != list(range(len(TENSORS))):
        return None
    tables = {}
    for key, (name, _) in enumerate(TENSORS):
        offset, size, compression = entries[key]
        if size != nbytes[name] or compression != zipfile.ZIP_STORED:
            return None
        tables[name] = (offset, size)
    return tables


def read_locator(fd: int, path: str, file_size: int, whole: bytes = b"") -> Optional[Tuple[PTLocator, int]]:
    """(the locator, its bytes) at the end of an open .pt shard, or None when it has none (whole:
    the file's bytes, when read already)."""
    if file_size < _TRAILER.size + _END.size:
        return None
    tail = whole[-4096:] if len(whole) == file_size else os.pread(fd, min(file_size, 4096), max(0, file_size - 4096))
    if not tail.endswith(MAGIC):
        end = tail.rfind(_END_SIGNATURE)
        if 0 <= end <= len(tail) - _END.size and _END.unpack_from(tail, end)[-1] != len(tail) - end - _END.size:
            raise CorruptShardError("corrupt .pt shard: the archive's end record claims a comment the "
                                    "file does not hold (cut short?)", path=path)
        return None
    recorded_size, meta, crc, text_size, _ = _TRAILER.unpack_from(tail, len(tail) - _TRAILER.size)
    comment = text_size + _TRAILER.size
    if text_size > MAX_JSON or comment + _END.size > file_size:
        raise _corrupt(path, f"claims {text_size} bytes")
    if comment + _END.size > len(tail):
        tail = os.pread(fd, comment + _END.size, file_size - comment - _END.size)
    text = tail[len(tail) - comment:len(tail) - _TRAILER.size]
    if zlib.crc32(struct.pack("<QI", recorded_size, meta) + text) != crc:
        raise _corrupt(path, "fails its CRC32 check")
    record = _END.unpack_from(tail, len(tail) - comment - _END.size)
    if record[0] != _END_SIGNATURE or record[-1] != comment:
        raise _corrupt(path, "is not the archive's comment")
    try:
        body = json.loads(text.decode("utf-8"))       # the writer's encoding: no detection
        fields, tables = body["fields"], {name: tuple(body["tables"][name]) for name, _ in TENSORS}
    except (ValueError, KeyError, TypeError):
        raise _corrupt(path, "is not the expected JSON") from None
    locator = PTLocator(fields, tables, recorded_size, meta)
    problem = _problem(locator, comment, file_size)
    if problem:
        raise _corrupt(path, problem)
    return locator, comment


def _corrupt(path: str, problem: str) -> CorruptShardError:
    return CorruptShardError(f"corrupt .pt shard: locator {problem}", path=path)


def _problem(loc: PTLocator, comment: int, file_size: int) -> Optional[str]:
    """Why a locator cannot describe a shard of file_size bytes, or None."""
    count, ident = loc.fields.get("num_samples"), loc.fields.get("dataset_id")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0 or not isinstance(ident, str):
        return f"num_samples {count!r} or dataset_id {ident!r}"
    for pair in loc.tables.values():
        if len(pair) != 2 or type(pair[0]) is not int or type(pair[1]) is not int or pair[0] < 0 or pair[1] < 0:
            return "has ranges that are not pairs of non-negative integers"
    if loc.file_size != file_size:
        return None                     # not this file's locator: `describes` sends it to torch.load
    want = {"offsets": 8 * (count + 1), "raw_lengths": 8 * count, "labels": 8 * count, "crc32": 8 * count}
    for name, size in want.items():
        if loc.tables[name][1] != size:
            return f"{name} has {loc.tables[name][1]} bytes for {count} samples"
    if loc.tables["key_blocks"][1] % 8:
        return "key_blocks is not a table of int64"
    return range_problem(loc.tables.values(), 0, loc.archive_end(comment), "nothing")


def describes(loc: PTLocator, view: Any, comment: int) -> bool:
    """Whether loc was written for this very archive (size, CRC32 of the bytes outside its tensors);
    False means the file was changed after it was written (read it through torch.load)."""
    end = loc.archive_end(comment) + _END.size
    return len(view) == loc.file_size and gaps_crc32(view, loc.tables.values(), 0, end) == loc.meta_crc32
