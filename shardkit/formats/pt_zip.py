"""A .pt shard's zip index, read as torch.load's miniz reads it, before torch.load reads anything.

miniz takes the last end-of-central-directory record and the central directory at the absolute
offset that record gives; Python's zipfile adjusts offsets for data prepended to the archive. A
file can therefore hold one directory for each, and a check through zipfile would look at the
other one than torch.load inflates. So the index is parsed here the way miniz finds it, and only
the archive torch.save writes is accepted: nothing before the first entry, entries back to back
(each followed by at most its data descriptor), the central directory right after them and the
end records right after it, one end-of-central-directory record, and every entry stored (not
compressed) with equal sizes, inside the file.
"""
from __future__ import annotations

import os
import struct
from typing import List, NamedTuple, Tuple

_EOCD = struct.Struct("<4sHHHHIIH")            # signature, disks, entries (disk, all), size, offset, comment
_ZIP64_LOCATOR = struct.Struct("<4sIQI")       # signature, disk, offset of the zip64 record, disks
_ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")    # signature, record size, versions, disks, entries x2, size, offset
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")
_LOCAL = struct.Struct("<4sHHHHHIIIHH")
EOCD_SIGNATURE = b"PK\x05\x06"
#: How far from the end miniz looks for the end record: the longest comment and the record.
_SEARCH = 0xFFFF + _EOCD.size
#: Bytes a data descriptor may take after an entry's data (signature, CRC32, two 64-bit sizes).
_DESCRIPTOR = 24
#: A torch.save archive holds a dozen entries; an index far larger is not one.
MAX_ENTRIES = 4096
MAX_DIRECTORY_BYTES = 1 << 20


class Entry(NamedTuple):
    """One central-directory entry: name, where its local header is, its flags and stored size."""

    name: bytes
    local: int
    flags: int
    size: int


def check_zip_index(name: str) -> None:
    """Raise ValueError unless the archive at name (a path or /proc/self/fd name) is laid out as
    torch.save writes it, seen as miniz sees it (module docstring); reads only the index."""
    with open(name, "rb") as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        tail_start = max(0, size - _SEARCH)
        tail = os.pread(fd, size - tail_start, tail_start)
        end = tail_start + _end_record(tail)
        entries, directory, directory_end = _directory(fd, tail, tail_start, end, size)
        if os.pread(fd, size - directory_end, directory_end).count(EOCD_SIGNATURE) != 1:
            raise ValueError("the archive has a second end-of-central-directory record")
        _check_entries(fd, entries, directory)


def _end_record(tail: bytes) -> int:
    """Where in tail miniz finds the end record: the last signature with a whole record after it."""
    at = tail.rfind(EOCD_SIGNATURE, 0, max(0, len(tail) - _EOCD.size + len(EOCD_SIGNATURE)))
    if at < 0:
        raise ValueError("no end-of-central-directory record in the archive's last 64 KiB")
    return at


def _directory(fd: int, tail: bytes, tail_start: int, end: int, size: int) -> Tuple[List[Entry], int, int]:
    """(entries, directory offset, where the directory's end records begin), once the end records
    say the directory lies right before them (no data prepended or appended to the archive)."""
    _, disk, disk_with_dir, count_here, count, dir_size, dir_offset, comment = _EOCD.unpack_from(tail, end - tail_start)
    if comment != size - end - _EOCD.size or disk or disk_with_dir or count_here != count:
        raise ValueError("the end-of-central-directory record does not end the file or spans disks")
    records_start = end
    locator = end - _ZIP64_LOCATOR.size
    if locator >= 0 and os.pread(fd, 4, locator) == b"PK\x06\x07":
        _, _, record, _ = _ZIP64_LOCATOR.unpack(os.pread(fd, _ZIP64_LOCATOR.size, locator))
        if record != locator - _ZIP64_EOCD.size:
            raise ValueError("the zip64 end record is not where its locator says (data was prepended)")
        (signature, record_size, _, _, _, _, count64_here, count64, size64,
         offset64) = _ZIP64_EOCD.unpack(os.pread(fd, _ZIP64_EOCD.size, record))
        if signature != b"PK\x06\x06" or record_size != _ZIP64_EOCD.size - 12 or count64_here != count64 or any(
                short not in (long, sentinel) for short, long, sentinel in
                ((count, count64, 0xFFFF), (dir_size, size64, 0xFFFFFFFF), (dir_offset, offset64, 0xFFFFFFFF))):
            raise ValueError("the zip64 end record disagrees with the end-of-central-directory record")
        count, dir_size, dir_offset, records_start = count64, size64, offset64, record
    if dir_offset + dir_size != records_start:
        raise ValueError("the central directory does not end where the end records begin (a second directory, "
                         "or data before or after the archive)")
    if not 0 < count <= MAX_ENTRIES or dir_size > MAX_DIRECTORY_BYTES or count * _CENTRAL.size > dir_size:
        raise ValueError(f"the central directory lists {count} entries in {dir_size} bytes")
    return _entries(os.pread(fd, dir_size, dir_offset), count), dir_offset, records_start


def _entries(directory: bytes, count: int) -> List[Entry]:
    """The directory's entries, each stored with equal sizes; ValueError otherwise."""
    entries, at = [], 0
    for _ in range(count):
        if len(directory) - at < _CENTRAL.size:
            raise ValueError("the central directory ends inside an entry")
        (signature, _, _, flags, method, _, _, _, packed, unpacked, name_length, extra_length, comment_length,
         _, _, _, local) = _CENTRAL.unpack_from(directory, at)
        name = directory[at + _CENTRAL.size:at + _CENTRAL.size + name_length]
        extra = directory[at + _CENTRAL.size + name_length:at + _CENTRAL.size + name_length + extra_length]
        at += _CENTRAL.size + name_length + extra_length + comment_length
        if signature != b"PK\x01\x02" or at > len(directory):
            raise ValueError("the central directory holds a damaged entry")
        unpacked, packed, local = _zip64_values(extra, (unpacked, packed, local))
        if method != 0 or flags & 1:
            raise ValueError(f"archive entry {name!r} is compressed or encrypted; torch.save stores entries "
                             "as they are")
        if packed != unpacked:
            raise ValueError(f"archive entry {name!r} claims {unpacked} bytes stored in {packed}")
        entries.append(Entry(name, local, flags, packed))
    if at != len(directory) or len({entry.name for entry in entries}) != count:
        raise ValueError("the central directory holds more than its entries, or a name twice")
    return entries


def _zip64_values(extra: bytes, values: Tuple[int, int, int]) -> Tuple[int, int, int]:
    """The sizes and offset, with each one saturated at 0xFFFFFFFF taken from the zip64 extra field
    (in that order, as miniz reads them)."""
    at, out = 0, list(values)
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        if kind == 1:
            field = at + 4
            for number, value in enumerate(out):
                if value == 0xFFFFFFFF and field + 8 <= at + 4 + length:
                    out[number] = struct.unpack_from("<Q", extra, field)[0]
                    field += 8
        at += 4 + length
    return out[0], out[1], out[2]


def _check_entries(fd: int, entries: List[Entry], directory: int) -> None:
    """Entries back to back from byte 0 to the directory: each local header matches its directory
    entry, and only a data descriptor lies between one entry's data and the next header."""
    position = 0
    for entry in sorted(entries, key=lambda entry: entry.local):
        if not position <= entry.local <= position + (_DESCRIPTOR if position else 0):
            raise ValueError(f"archive entry {entry.name!r} starts at {entry.local}, not right after the one "
                             "before it (data before or between the entries)")
        header = os.pread(fd, _LOCAL.size, entry.local)
        if len(header) != _LOCAL.size:
            raise ValueError(f"archive entry {entry.name!r} lies past the end of the file")
        signature, _, flags, method, _, _, _, packed, unpacked, name_length, extra_length = _LOCAL.unpack(header)
        sizes_later = flags & 8 and packed == unpacked == 0
        if signature != b"PK\x03\x04" or method != 0 or flags != entry.flags or \
                os.pread(fd, name_length, entry.local + _LOCAL.size) != entry.name or \
                not (sizes_later or packed == unpacked == entry.size or packed == unpacked == 0xFFFFFFFF):
            raise ValueError(f"archive entry {entry.name!r}: its local header differs from the central directory")
        position = entry.local + _LOCAL.size + name_length + extra_length + entry.size
        if position > directory:
            raise ValueError(f"archive entry {entry.name!r} runs into the central directory")
    if not position <= directory <= position + _DESCRIPTOR:
        raise ValueError("bytes lie between the last entry and the central directory")
