"""Sample keys stored in a shard: every format keeps them as the same two arrays (formats/keys.md).

  key data    uint8   independently zlib-compressed blocks of KEY_BLOCK keys, back to back
  key blocks  int64   (blocks + 1,) offsets: block b is key_data[blocks[b]:blocks[b+1]]

A block inflates to: uint32 count n, n uint32 key lengths, then the n keys' bytes. Keys are
UTF-8 (a file name that is not valid UTF-8 keeps its bytes: Python's surrogateescape). Keys of
consecutive rows (`table.csv:17`, `table.csv:18`) compress to a few bytes each, and a reader
inflates one block of about a thousand keys for a lookup, only when a key is asked for.
"""
from __future__ import annotations

import functools
import zlib
from typing import Callable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import CorruptSampleError, CorruptShardError
from ..records import KeyRun

#: Keys per compressed block.
KEY_BLOCK = 1024
#: zlib level of the key blocks.
KEY_LEVEL = 6
#: Largest inflated block accepted (a longer claim is corrupt): 1024 keys of 64 KiB each.
MAX_BLOCK_BYTES = KEY_BLOCK * (4 + (64 << 10)) + 4


def key_bytes(key: Optional[str]) -> bytes:
    """The stored bytes of a key: UTF-8, undecodable file-name bytes kept as they are."""
    return b"" if key is None else key.encode("utf-8", "surrogateescape")


def _encoded(keys: Sequence[Optional[str]]) -> List[bytes]:
    """key_bytes of each key; one encode call for a run of keys without NUL (row keys, file names)."""
    try:
        parts = "\x00".join(keys).encode("utf-8", "surrogateescape").split(b"\x00")  # type: ignore[arg-type]
    except TypeError:                                   # some key is None
        parts = []
    return parts if len(parts) == len(keys) else [key_bytes(key) for key in keys]


#: 10**d for d = 1..19: rows below each have at most d digits.
_POWERS = 10 ** np.arange(1, 20, dtype=np.uint64)
#: Rows of a KeyRun packed by run_bytes end below this (uint64 digits); later ones go key by key.
RUN_ROWS_END = 10 ** 19


def run_bytes(run: KeyRun) -> Tuple[np.ndarray, bytes]:
    """(byte length of each key, the keys' bytes back to back) of a run of row keys, as key_bytes
    gives them: the prefix's bytes, then the row's (increasing) number in ASCII digits, built for
    all rows at once."""
    prefix = np.frombuffer(key_bytes(run.prefix), dtype=np.uint8)
    rows = run.number_array()
    lengths = np.empty(run.length, dtype=np.int64)
    pieces, start = [], 0
    for digits, stop in enumerate(np.searchsorted(rows, _POWERS).tolist() + [run.length], start=1):
        if stop > start:                                 # the rows of `digits` digits
            keys = np.empty((stop - start, len(prefix) + digits), dtype=np.uint8)
            keys[:, :len(prefix)] = prefix
            value = rows[start:stop]
            for column in range(len(prefix) + digits - 1, len(prefix) - 1, -1):
                rest = value // 10
                keys[:, column] = value - rest * 10 + ord("0")
                value = rest
            pieces.append(keys.tobytes())
            lengths[start:stop] = len(prefix) + digits
            start = stop
    return lengths, b"".join(pieces)


def _block(lengths: np.ndarray, data: Union[bytes, memoryview]) -> bytes:
    """One stored key block: the zlib stream of its count, its keys' lengths and their bytes."""
    header = np.empty(len(lengths) + 1, dtype="<u4")
    header[0] = len(lengths)
    header[1:] = lengths
    return _compressed(header.tobytes() + data)


@functools.lru_cache(maxsize=2)
def _compressed(block: bytes) -> bytes:
    """A key block's zlib stream, remembered for the next blocks: every column of a dataset
    of fields stores the same keys, so its files' writers pack the same blocks one after another."""
    return zlib.compress(block, KEY_LEVEL)


class KeyPacker:
    """Collects a shard's keys while it is written; finish() gives (key data, key blocks)."""

    def __init__(self) -> None:
        self._blocks: List[bytes] = []
        self._lengths: List[int] = []       # the block being filled: its keys' byte lengths ...
        self._parts: List[bytes] = []       # ... and their bytes
        self.count = 0

    def add(self, key: Optional[str]) -> None:
        """The key of the next sample (None: unknown, stored as an empty key)."""
        data = key_bytes(key)
        self._lengths.append(len(data))
        self._parts.append(data)
        self.count += 1
        if len(self._lengths) == KEY_BLOCK:
            self._flush()

    def extend(self, keys: Optional[Sequence[Optional[str]]], count: int) -> None:
        """Keys of the next `count` samples (None: all unknown); a KeyRun without a string per key."""
        if isinstance(keys, KeyRun) and keys.end() <= RUN_ROWS_END:
            lengths, data = run_bytes(keys)
        else:
            encoded = [b""] * count if keys is None else _encoded(keys)
            lengths, data = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), b"".join(encoded)
        ends = np.cumsum(lengths)
        view, position, offset = memoryview(data), 0, 0
        while position < len(lengths):               # whole runs into blocks, not key by key
            take = min(KEY_BLOCK - len(self._lengths), len(lengths) - position)
            end = int(ends[position + take - 1])
            if take == KEY_BLOCK:                    # a whole block, straight from the run
                self._blocks.append(_block(lengths[position:position + take], view[offset:end]))
            else:
                self._lengths.extend(lengths[position:position + take].tolist())
                self._parts.append(data[offset:end])
                if len(self._lengths) == KEY_BLOCK:
                    self._flush()
            position, offset = position + take, end
        self.count += len(lengths)

    def _flush(self) -> None:
        self._blocks.append(_block(np.array(self._lengths, dtype=np.int64), b"".join(self._parts)))
        self._lengths, self._parts = [], []

    def finish(self) -> Tuple[bytes, np.ndarray]:
        """(key data, int64 block offsets) of every key added."""
        if self._lengths:
            self._flush()
        offsets = np.zeros(len(self._blocks) + 1, dtype=np.int64)
        np.cumsum([len(block) for block in self._blocks], out=offsets[1:])
        return b"".join(self._blocks), offsets


class KeyTable:
    """A shard's keys, read lazily: nothing is read until key() is first called, then only the
    small block table and the one block that holds the key."""

    def __init__(self, path: str, count: int, blocks: "np.ndarray | Callable[[], np.ndarray]",
                 data: "np.ndarray | Callable[[int, int], bytes]") -> None:
        """blocks: the block offsets, or what loads them; data: the key bytes (a uint8 array, e.g.
        a view of the shard's map), or what reads bytes [begin, end) of them. Arrays rather than
        closures keep an open shard at fewer objects for the garbage collector to walk."""
        self._path = path
        self._count = count
        self._load_blocks = blocks
        self._data = data
        self._blocks: Optional[np.ndarray] = None
        self._cached: Optional[Tuple[int, List[bytes]]] = None

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt key table: {problem}", path=self._path)

    def _damaged(self, index: int, problem: str) -> CorruptSampleError:
        return CorruptSampleError(self._path, index, f"its key is unreadable: key table {problem}")

    def key(self, index: int) -> Optional[str]:
        """The key of sample index (None when the sample was stored without one)."""
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        block, position = divmod(index, KEY_BLOCK)
        if self._cached is None or self._cached[0] != block:
            self._cached = (block, self._read_block(block, index))
        raw = self._cached[1][position]
        return raw.decode("utf-8", "surrogateescape") if raw else None

    def _stored_offsets(self) -> np.ndarray:
        """The block offsets as stored (unchecked)."""
        loaded = self._load_blocks
        return np.asarray(loaded if isinstance(loaded, np.ndarray) else loaded(), dtype=np.int64)

    def _stored_bytes(self, begin: int, end: int) -> bytes:
        """Bytes [begin, end) of the stored (deflated) key data."""
        return self._data[begin:end].tobytes() if isinstance(self._data, np.ndarray) else self._data(begin, end)

    def _read_block(self, block: int, index: int) -> List[bytes]:
        """The keys of one block; damage in it is reported against sample index, whose key it holds."""
        if self._blocks is None:
            blocks = self._stored_offsets()
            if len(blocks) != -(-self._count // KEY_BLOCK) + 1 or blocks[0] != 0 or np.any(np.diff(blocks) < 0):
                raise self._corrupt(f"{len(blocks)} block offsets for {self._count} keys, or not increasing")
            self._blocks = blocks
        begin, end = int(self._blocks[block]), int(self._blocks[block + 1])
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(self._stored_bytes(begin, end), MAX_BLOCK_BYTES)
        except zlib.error as exc:
            raise self._damaged(index, f"block {block} does not inflate ({exc})") from None
        expected = min(KEY_BLOCK, self._count - block * KEY_BLOCK)
        header = 4 * (expected + 1)
        if len(data) < header or int.from_bytes(data[:4], "little") != expected:
            raise self._damaged(index, f"block {block} does not hold its {expected} keys")
        lengths = np.frombuffer(data, dtype="<u4", count=expected, offset=4).astype(np.int64)
        ends = header + np.cumsum(lengths)
        if not inflater.eof or int(ends[-1]) != len(data):
            raise self._damaged(index, f"block {block}: key lengths do not add up to its bytes")
        starts = np.concatenate([[header], ends[:-1]]).tolist()
        return [data[start:stop] for start, stop in zip(starts, ends.tolist())]
