"""The locator of an HDF5 shard (format version 3): where its tables and data chunks lie in the file.

The writer records it in the HDF5 userblock (bytes at the start of the file that HDF5 skips),
so a reader opens a shard with one pread and one mmap instead of parsing HDF5 metadata with h5py
(about 10 ms per shard, paid again by every fresh DataLoader worker). formats/hdf5.md is the
byte-level contract. The locator is untrusted like the rest of the file: `parse` checks its CRC32,
that every range lies inside the file after the locator and that no two ranges overlap, and that
its counts agree with each other; the reader checks the tables it points at as it checks h5py's.

`meta_crc32` is the CRC32 of every byte of the file outside the locator and the ranges (HDF5's
superblock, object headers, chunk index): a file changed with HDF5 tools after it was written no
longer matches it, and is read through h5py with every structure check (`describes`).
"""
from __future__ import annotations

import mmap
import os
import struct
import zlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import CorruptShardError
from .locating import gaps_crc32, range_problem

MAGIC = b"SHKLOC\r\n"
#: What versions 1 and 2 start with (they have no userblock).
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
VERSION = 1
#: The tables a locator points at, in this order (offsets is empty in the array layout).
TABLES = ("offsets", "labels", "crc32", "keys", "key_blocks")
#: The locator's head, field by field (name, struct code, little-endian): the one definition that
#: both writing and reading use, by name (formats/hdf5.md lists the same fields).
HEAD_FIELDS = (("magic", "8s"), ("version", "I"), ("length", "I"), ("userblock", "Q"), ("file_size", "Q"),
               ("meta_crc32", "I"), ("flags", "I"), ("count", "Q"), ("row_bytes", "Q"), ("chunk_bytes", "Q"),
               ("data_bytes", "Q"), ("chunks", "I"), ("ident_length", "I"))
_HEAD = struct.Struct("<" + "".join(code for _, code in HEAD_FIELDS))
_HEAD_NAMES = tuple(name for name, _ in HEAD_FIELDS)
_RANGE = struct.Struct("<QQ")
_CRC = struct.Struct("<I")
#: flags: the data is stored uncompressed in `chunks` (else a reader reads it through h5py).
MAPPED = 1
#: Bytes read first: the whole locator of a shard of up to ~2,000 chunks (1 MiB each) and, in a
#: shard of a few hundred small samples, all of HDF5's metadata (what `describes` checks).
FIRST_READ = 16 << 10
#: Largest locator accepted (one address per chunk of at least 64 KiB: 1 TiB of data).
MAX_LOCATOR = 128 << 20


@dataclass
class Locator:
    """What a reader needs to find a shard's bytes, without HDF5 (byte offsets are from the file's start)."""

    count: int
    row_bytes: int                  # bytes per row of /data: 1 (bytes layout) or one sample (array)
    chunk_bytes: int                # bytes per chunk of /data
    data_bytes: int                 # logical bytes of /data
    dataset_id: str
    tables: Dict[str, Tuple[int, int]]     # name -> (offset, bytes)
    chunks: np.ndarray              # int64 file offset of each chunk of /data
    flags: int = MAPPED
    userblock: int = 0
    file_size: int = 0
    meta_crc32: int = 0
    #: The file as `located` read and checked it (locating.FileView), for reads of its ranges.
    view: Any = field(default=None, repr=False, compare=False)

    @property
    def mapped(self) -> bool:
        return bool(self.flags & MAPPED)

    def ranges(self) -> List[Tuple[int, int]]:
        """(offset, size) of every table and chunk."""
        return list(self.tables.values()) + [(int(begin), self.chunk_bytes) for begin in self.chunks.tolist()]

    def encode(self) -> bytes:
        """The locator's bytes, CRC32 last."""
        ident = self.dataset_id.encode("utf-8")
        head = dict(magic=MAGIC, version=VERSION, length=self.size(), userblock=self.userblock,
                    file_size=self.file_size, meta_crc32=self.meta_crc32, flags=self.flags, count=self.count,
                    row_bytes=self.row_bytes, chunk_bytes=self.chunk_bytes, data_bytes=self.data_bytes,
                    chunks=len(self.chunks), ident_length=len(ident))
        body = _HEAD.pack(*(head[name] for name, _ in HEAD_FIELDS))
        body += b"".join(_RANGE.pack(*self.tables.get(name, (0, 0))) for name in TABLES)
        body += ident + np.asarray(self.chunks, dtype="<i8").tobytes()
        return body + _CRC.pack(zlib.crc32(body))

    def size(self) -> int:
        """Bytes of the encoded locator."""
        return (_HEAD.size + _RANGE.size * len(TABLES) + len(self.dataset_id.encode("utf-8"))
                + 8 * len(self.chunks) + _CRC.size)


def userblock_size(chunks: int, dataset_id: str) -> int:
    """The userblock a shard of so many data chunks needs: a power of two, at least 512 (HDF5's rule)."""
    need = _HEAD.size + _RANGE.size * len(TABLES) + len(dataset_id.encode("utf-8")) + 8 * chunks + _CRC.size
    return max(512, 1 << (need - 1).bit_length())


def meta_crc32(view: Any, locator: Locator) -> int:
    """CRC32 of the file's bytes after the userblock that no range covers (HDF5's own metadata)."""
    return gaps_crc32(view, locator.ranges(), locator.userblock, locator.file_size)


def seal(path: str, locator: Locator) -> None:
    """Write the locator into the userblock of the closed HDF5 file at path (the file's size and
    metadata CRC32 filled in first). The file is mapped, not read: only the userblock and HDF5's
    metadata are looked at, so sealing a shard does not hold a copy of it."""
    with open(path, "r+b") as handle:
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            locator.file_size = len(data)
            locator.meta_crc32 = meta_crc32(data, locator)
            blank = not any(data[:locator.userblock])
        encoded = locator.encode()
        if len(encoded) > locator.userblock or not blank:
            raise ValueError(f"{path}: the locator does not fit its userblock")
        handle.seek(0)
        handle.write(encoded)


def read_head(fd: int, path: str, first: Optional[bytes] = None) -> Optional[bytes]:
    """The locator's bytes at the start of an open shard (first: its first FIRST_READ bytes, when
    read already), or None when it starts with HDF5's signature instead (versions 1-2);
    CorruptShardError when it starts with neither."""
    head = os.pread(fd, FIRST_READ, 0) if first is None else first
    if head.startswith(HDF5_SIGNATURE):
        return None
    if not head.startswith(MAGIC):
        raise CorruptShardError("corrupt HDF5 shard: starts with neither a locator nor the HDF5 "
                                "signature", path=path)
    if len(head) < _HEAD.size:
        raise _corrupt(path, "is cut short")
    length = _head(head)["length"]
    if not _HEAD.size + _CRC.size <= length <= MAX_LOCATOR:
        raise _corrupt(path, f"claims {length} bytes")
    if length > len(head):
        head += os.pread(fd, length - len(head), len(head))
    if len(head) < length:
        raise _corrupt(path, f"claims {length} bytes, the file is shorter")
    return head[:length]


def _head(raw: bytes) -> Dict[str, Any]:
    """The locator head's fields by name."""
    return dict(zip(_HEAD_NAMES, _HEAD.unpack_from(raw)))


def _corrupt(path: str, problem: str) -> CorruptShardError:
    return CorruptShardError(f"corrupt HDF5 shard: locator {problem}", path=path)


def parse(raw: bytes, path: str, file_size: int) -> Locator:
    """The locator in raw, after checking it; CorruptShardError naming the shard otherwise."""
    body, (crc,) = raw[:-_CRC.size], _CRC.unpack_from(raw, len(raw) - _CRC.size)
    if zlib.crc32(body) != crc:
        raise _corrupt(path, "fails its CRC32 check")
    head = _head(body)
    if head["version"] != VERSION:
        raise _corrupt(path, f"version {head['version']}; this shardkit reads {VERSION}")
    position, ident_length, chunks = _HEAD.size + _RANGE.size * len(TABLES), head["ident_length"], head["chunks"]
    if position + ident_length + 8 * chunks + _CRC.size != head["length"]:
        raise _corrupt(path, "lengths do not add up")
    tables = {name: _RANGE.unpack_from(body, _HEAD.size + _RANGE.size * k) for k, name in enumerate(TABLES)}
    try:
        dataset_id = body[position:position + ident_length].decode("utf-8")
    except UnicodeDecodeError:
        raise _corrupt(path, "has a dataset_id that is not UTF-8") from None
    addresses = np.frombuffer(body, dtype="<i8", count=chunks, offset=position + ident_length).astype(np.int64)
    locator = Locator(head["count"], head["row_bytes"], head["chunk_bytes"], head["data_bytes"], dataset_id, tables,
                      addresses, head["flags"], head["userblock"], head["file_size"], head["meta_crc32"])
    problem = _problem(locator, head["length"], file_size)
    if problem:
        raise _corrupt(path, problem)
    return locator


def _problem(loc: Locator, length: int, file_size: int) -> Optional[str]:
    """Why a locator cannot describe a shard of file_size bytes, or None."""
    count = loc.count
    expected = {"labels": 8 * count, "crc32": 4 * count}
    if loc.userblock < length or loc.userblock & (loc.userblock - 1) or loc.userblock >= max(file_size, 1):
        return f"userblock of {loc.userblock} bytes cannot hold its {length} bytes inside the file"
    if loc.file_size != file_size:
        return None                     # not this file's locator: `describes` sends it to h5py
    for name, want in expected.items():
        if loc.tables[name][1] != want:
            return f"/{name} has {loc.tables[name][1]} bytes for {count} samples"
    if loc.tables["key_blocks"][1] % 8 or loc.tables["offsets"][1] % 8:
        return "key_blocks or offsets is not a table of int64"
    if loc.row_bytes < 1 or loc.chunk_bytes < 0:
        return f"rows of {loc.row_bytes} bytes, chunks of {loc.chunk_bytes}"
    if loc.mapped:
        if loc.row_bytes == 1 and loc.tables["offsets"][1] != 8 * (count + 1):
            return f"/offsets has {loc.tables['offsets'][1]} bytes for {count} samples"
        if loc.row_bytes > 1 and (loc.data_bytes != count * loc.row_bytes or loc.tables["offsets"][1]):
            return f"/data has {loc.data_bytes} bytes for {count} rows of {loc.row_bytes}"
        if loc.data_bytes and (loc.chunk_bytes < 1 or loc.chunk_bytes % loc.row_bytes
                               or len(loc.chunks) != -(-loc.data_bytes // loc.chunk_bytes)):
            return f"{len(loc.chunks)} chunks of {loc.chunk_bytes} bytes cannot hold {loc.data_bytes} bytes"
        if not loc.data_bytes and len(loc.chunks):
            return "chunks for no data"
    elif len(loc.chunks):
        return "chunks for data it does not map"
    return range_problem(loc.ranges(), loc.userblock, file_size, "the userblock")


def describes(loc: Locator, view: Any, file_size: int) -> bool:
    """Whether loc was written for this very file: its size, and the CRC32 of its HDF5 metadata.
    False means the file was changed after it was written (read it through h5py)."""
    return loc.file_size == file_size and meta_crc32(view, loc) == loc.meta_crc32


def locate(handle: Any, mapped: bool, dataset_id: str, userblock: int) -> Locator:
    """The locator of an open h5py shard, from HDF5's own view of it: the writer records it, and
    `verify --deep` compares the recorded one with it. ValueError when a table is not stored
    contiguously, or the data is not in equal, unfiltered chunks while `mapped` is asked for."""
    tables = {}
    for name in TABLES:
        dset = handle.get(name)
        size = 0 if dset is None else int(dset.size) * dset.dtype.itemsize
        offset = dset.id.get_offset() if size else 0
        if offset is None:
            raise ValueError(f"/{name} is not stored contiguously")
        tables[name] = (int(offset), size)
    data = handle["data"]
    row_bytes = int(np.prod(data.shape[1:], dtype=np.int64)) * data.dtype.itemsize
    data_bytes = int(data.size) * data.dtype.itemsize
    count = int(handle["labels"].shape[0])
    chunk_bytes, addresses = 0, np.zeros(0, dtype=np.int64)
    if mapped and data_bytes:
        if data.chunks is None or data.compression or data.shuffle or data.fletcher32 or data.scaleoffset:
            raise ValueError("/data is not stored in plain chunks")
        chunk_bytes = int(np.prod(data.chunks, dtype=np.int64)) * data.dtype.itemsize
        addresses = np.full(-(-data_bytes // chunk_bytes), -1, dtype=np.int64)
        rows = int(data.chunks[0])

        def note(info: Any) -> None:
            if info.size == chunk_bytes and info.filter_mask == 0:
                addresses[info.chunk_offset[0] // rows] = info.byte_offset

        if hasattr(data.id, "chunk_iter"):
            data.id.chunk_iter(note)
        else:
            for k in range(data.id.get_num_chunks()):
                note(data.id.get_chunk_info(k))
        if len(addresses) and addresses.min() < 0:
            raise ValueError("/data has chunks that are missing or not whole")
    return Locator(count, row_bytes, chunk_bytes, data_bytes, dataset_id, tables, addresses,
                   MAPPED if mapped else 0, userblock)


def disagreement(recorded: Locator, actual: Locator) -> Optional[str]:
    """How a recorded locator differs from the one HDF5's view of the file gives, or None."""
    for name in ("flags", "count", "row_bytes", "chunk_bytes", "data_bytes", "dataset_id", "tables"):
        if getattr(recorded, name) != getattr(actual, name):
            return f"{name} is {getattr(recorded, name)!r}, HDF5 says {getattr(actual, name)!r}"
    if not np.array_equal(recorded.chunks, actual.chunks):
        return "chunk addresses differ from HDF5's"
    return None
