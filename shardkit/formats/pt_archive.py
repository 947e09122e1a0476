"""The zip archive torch.save writes for a shard's dict, written without importing torch.

A .pt shard holds plain fields (str, int, None, lists of int) and 1-D/2-D uint8 or int64 tensors.
torch.save stores such a dict as a protocol-2 pickle (data.pkl) whose tensors refer by key to
stored, 64-byte aligned zip records (data/0, data/1, ...), beside the records .format_version,
.storage_alignment, byteorder, version and .data/serialization_id. This module writes the same
records, in the same order, with the same pickle opcodes and zip headers, so `torch.load`
(weights_only) reads the shard as it reads torch.save's, and converting to .pt does not pay for
importing torch (one to three seconds per process). Only .data/serialization_id differs: torch
only logs it, and it is computed here over the records as written (formats/pt.md).

An archive that would reach 4 GiB needs zip64 headers, which this writer does not emit: `write`
returns False and the caller hands such a shard to torch.save itself.
"""
from __future__ import annotations

import pickle
import struct
import sys
import zlib
from typing import Any, BinaryIO, Dict, List, NamedTuple, Tuple

#: Storage class of each stored element type (torch's legacy names, as torch.save pickles them).
STORAGES = {"uint8": "ByteStorage", "int64": "LongStorage"}
ALIGNMENT = 64
#: An archive reaching this size needs zip64 local headers: torch.save writes it instead.
ZIP32_LIMIT = 0xFFFFFFFF
_LOCAL = struct.Struct("<IHHHHHIIIHH")
_DESCRIPTOR = struct.Struct("<IIII")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_END64 = struct.Struct("<IQHHIIQQQQ")
_LOCATOR64 = struct.Struct("<IIQI")
_END = struct.Struct("<IHHHHIIH")
_MASK = (1 << 64) - 1


class Tensor(NamedTuple):
    """A C-contiguous tensor to store: its bytes (native order), element type and shape."""

    data: Any               # bytes-like
    dtype: str              # a key of STORAGES
    shape: Tuple[int, ...]


def write(handle: BinaryIO, shard: Dict[str, Any]) -> bool:
    """Write torch.save(shard)'s archive to handle (at its start); False, having written nothing,
    when the archive would need zip64 headers."""
    tensors = [value for value in shard.values() if isinstance(value, Tensor)]
    records: List[Tuple[str, Any]] = [("data.pkl", _pickle(shard)), (".format_version", b"1"),
                                      (".storage_alignment", str(ALIGNMENT).encode()),
                                      ("byteorder", sys.byteorder.encode())]
    records += [(f"data/{key}", tensor.data) for key, tensor in enumerate(tensors)]
    records.append(("version", b"3\n"))
    crcs = [zlib.crc32(data) for _, data in records]
    records.append((".data/serialization_id", _serialization_id(records, crcs)))
    crcs.append(zlib.crc32(records[-1][1]))
    if _archive_size(records) >= ZIP32_LIMIT:
        return False
    central = bytearray()
    position = 0
    for (name, data), crc in zip(records, crcs):
        full = b"archive/" + name.encode()
        size = memoryview(data).nbytes
        start = position + _LOCAL.size + len(full) + 4
        padding = -start % ALIGNMENT
        flags = 0x0808 if size else 0x0800     # UTF-8 names; a data descriptor after each non-empty record
        head = _LOCAL.pack(0x04034B50, 0, flags, 0, 0, 0, 0, 0, 0, len(full), padding + 4)
        handle.write(head + full + b"FB" + struct.pack("<H", padding) + b"Z" * padding)
        handle.write(data)
        if size:
            handle.write(_DESCRIPTOR.pack(0x08074B50, crc, size, size))
        central += _CENTRAL.pack(0x02014B50, 0, 0, flags, 0, 0, 0, crc, size, size, len(full), 0, 0, 0, 0, 0,
                                 position) + full
        position = start + padding + size + (_DESCRIPTOR.size if size else 0)
    count = len(records)
    end64 = position + len(central)
    handle.write(central + _END64.pack(0x06064B50, _END64.size - 12, 0x031E, 0x002D, 0, 0, count, count,
                                       len(central), position)
                 + _LOCATOR64.pack(0x07064B50, 0, end64, 1)
                 + _END.pack(0x06054B50, 0, 0, count, count, len(central), position, 0))
    return True


def _archive_size(records: List[Tuple[str, Any]]) -> int:
    """An upper bound of the archive's size (every record padded fully)."""
    per_record = _LOCAL.size + 4 + ALIGNMENT + _DESCRIPTOR.size + _CENTRAL.size
    return sum(per_record + 2 * (8 + len(name)) + memoryview(data).nbytes for name, data in records) + 200


def _serialization_id(records: List[Tuple[str, Any]], crcs: List[int]) -> bytes:
    """Twenty digits combining the records' names, twenty combining their CRC32s (torch's form)."""
    names = combined = 0
    for (name, data), crc in zip(records, crcs):
        names = _combine(names, zlib.crc32(name.encode()))
        if memoryview(data).nbytes:
            combined = _combine(combined, crc)
    return b"%020d%020d" % (names, combined)


def _combine(seed: int, value: int) -> int:
    """c10::hash_combine on 64-bit words."""
    return seed ^ ((value + 0x9E3779B9 + (seed << 6) + (seed >> 2)) & _MASK)


class _Pickler:
    """The protocol-2 opcodes Python's pickle emits for torch.save's dict, memo included."""

    def __init__(self) -> None:
        self.out = bytearray(b"\x80\x02")
        self.memo: Dict[Any, int] = {}

    def put(self, key: Any) -> None:
        index = self.memo[key] = len(self.memo)
        self.out += b"q" + bytes([index]) if index < 256 else b"r" + struct.pack("<I", index)

    def get(self, key: Any) -> bool:
        """Emit a reference to key if it was stored before."""
        index = self.memo.get(key)
        if index is None:
            return False
        self.out += b"h" + bytes([index]) if index < 256 else b"j" + struct.pack("<I", index)
        return True

    def value(self, value: Any) -> None:
        if value is None:
            self.out += b"N"
        elif isinstance(value, bool):
            self.out += b"\x88" if value else b"\x89"
        elif isinstance(value, int):
            self.integer(value)
        elif isinstance(value, str):
            if not self.get(("str", value)):
                encoded = value.encode("utf-8", "surrogatepass")
                self.out += b"X" + struct.pack("<I", len(encoded)) + encoded
                self.put(("str", value))
        elif isinstance(value, (list, tuple)) and not isinstance(value, Tensor):
            self.sequence(value)
        else:
            raise TypeError(f"a .pt shard cannot hold {type(value).__name__}")

    def integer(self, value: int) -> None:
        if 0 <= value < 256:
            self.out += b"K" + bytes([value])
        elif 0 <= value < 65536:
            self.out += b"M" + struct.pack("<H", value)
        elif -(1 << 31) <= value < (1 << 31):
            self.out += b"J" + struct.pack("<i", value)
        else:
            encoded = pickle.encode_long(value)     # type: ignore[attr-defined]
            self.out += b"\x8a" + bytes([len(encoded)]) + encoded

    def sequence(self, items: Any) -> None:
        if isinstance(items, list):
            self.out += b"]"
            self.put(("object", len(self.memo)))
            for start in range(0, len(items), 1000):
                batch = items[start:start + 1000]
                self.out += b"(" if len(batch) > 1 else b""
                for item in batch:
                    self.value(item)
                self.out += b"e" if len(batch) > 1 else b"a"
            return
        if not items:
            self.out += b")"
            return
        self.out += b"" if len(items) <= 3 else b"("
        for item in items:
            self.value(item)
        self.out += {1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(items), b"t")
        self.put(("object", len(self.memo)))

    def global_name(self, module: str, name: str) -> None:
        if not self.get(("global", module, name)):
            self.out += b"c" + f"{module}\n{name}\n".encode()
            self.put(("global", module, name))

    def tensor(self, tensor: Tensor, key: int) -> None:
        """torch._utils._rebuild_tensor_v2((storage pid), 0, size, stride, False, OrderedDict())."""
        itemsize = 1 if tensor.dtype == "uint8" else 8
        numel = memoryview(tensor.data).nbytes // itemsize
        strides = tuple(_strides(tensor.shape))
        self.global_name("torch._utils", "_rebuild_tensor_v2")
        self.out += b"(("
        self.value("storage")
        self.global_name("torch", STORAGES[tensor.dtype])
        self.value(str(key))
        self.value("cpu")
        self.integer(numel)
        self.out += b"t"
        self.put(("object", len(self.memo)))
        self.out += b"Q"
        self.integer(0)
        self.sequence(tuple(tensor.shape))
        self.sequence(strides)
        self.value(False)
        self.global_name("collections", "OrderedDict")
        self.out += b")R"
        self.put(("object", len(self.memo)))
        self.out += b"t"
        self.put(("object", len(self.memo)))
        self.out += b"R"
        self.put(("object", len(self.memo)))


def _strides(shape: Tuple[int, ...]) -> List[int]:
    strides: List[int] = []
    step = 1
    for size in reversed(shape):
        strides.insert(0, step)
        step *= max(size, 1)
    return strides


def _pickle(shard: Dict[str, Any]) -> bytes:
    pickler = _Pickler()
    pickler.out += b"}"
    pickler.put(("object", 0))
    items, key = list(shard.items()), 0
    for start in range(0, len(items), 1000):
        batch = items[start:start + 1000]
        pickler.out += b"(" if len(batch) > 1 else b""
        for name, value in batch:
            pickler.value(name)
            if isinstance(value, Tensor):
                pickler.tensor(value, key)
                key += 1
            else:
                pickler.value(value)
        pickler.out += b"u" if len(batch) > 1 else b"s"
    return bytes(pickler.out + b".")
