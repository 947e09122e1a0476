"""Reading an LMDB shard through the process's environment of its file (lmdb_env.py), and the
checks that turn a damaged file into CorruptShardError or CorruptSampleError."""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import weakref
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import lmdb
import numpy as np

from ..errors import CorruptSampleError, CorruptShardError
from ..integrity import fd_path
from ..records import Encoded
from ..schema import SampleSchema
from .base import ShardReader
from .keys import KeyTable
from .lmdb_env import ENVIRONMENTS, SharedEnv, acquire
from .lmdb_layout import (CRCS_KEY, FLAG_ZLIB, FORMAT_NAME, FORMAT_VERSION, KEY_BLOCKS_KEY, KEYS_KEY, LABELS_KEY,
                          MAX_META_BYTES, META_KEY, RECORD, RECORD_MAGIC, RECORD_VERSION, rows_per_block, sample_key,
                          short_message)
from .packing import array_dtype, check_lengths, restore


#: RECORD as a numpy record (the same 32 bytes), to check a batch's headers at once.
_HEADER = np.dtype([("magic", "S2"), ("version", "u1"), ("flags", "u1"), ("crc", "<u4"), ("label", "<i8"),
                    ("raw", "<u8"), ("stored", "<u8")])
_HEADER_BYTES = np.arange(RECORD.size)
assert _HEADER.itemsize == RECORD.size


class _BlockRows:
    """The rows of an LMDB shard's blocks, for its reader and for reads that need nothing else of
    it: each row copied out of LMDB's map under the environment's lock (a view could outlive the
    map, which has no Python object to pin it), at the block address the reader checked at the
    block's first read (8 bytes a block); None once the environment is closed, and the caller
    opens the shard again."""

    __slots__ = ("_shared", "_addresses", "_per_block", "_width", "_dtype", "_look_up")

    def __init__(self, reader: "LMDBReader", shared: SharedEnv) -> None:
        self._shared = shared
        self._addresses = reader._block_addresses       # the reader's own: filled by _look_up
        self._per_block, self._width = reader._per_block, reader._width
        self._dtype = np.dtype((array_dtype(reader._schema), tuple(reader._schema.shape)))
        self._look_up = reader._block_address

    def __getitem__(self, index: int) -> Optional[np.ndarray]:
        block, position = divmod(index, self._per_block)
        width, shared = self._width, self._shared
        with shared.lock:       # no close unmaps the block during the copy
            if not shared.mapped:
                return None
            address = self._addresses.item(block) or self._look_up(shared, block, index)
            stored = ctypes.string_at(address + position * width, width)
        return np.frombuffer(stored, dtype=self._dtype)[0]      # read-only, as every reader's rows are


class LMDBReader(ShardReader):
    """Random access by key through the mmap'd environment; payloads are copied out of the map
    (an evicted handle unmaps it), array payloads come back as read-only arrays."""

    def __init__(self, path: str, schema: SampleSchema, readahead: bool = True, fd: Optional[int] = None) -> None:
        self._path = path
        self._schema = schema
        self._shared: Optional[SharedEnv] = None
        self._key, shared = acquire(path, readahead, fd)
        # A reader dropped without close() (its dataset garbage collected) still gives its environment back.
        self._release = weakref.finalize(self, ENVIRONMENTS.release, self._key, shared)
        self._fd = fd                   # the caller's descriptor of path, used only while opening
        self._shared = shared
        #: Whether this shard's map uses OS readahead.
        self.readahead = shared.readahead
        self._per_block = 0
        self._width = schema.sample_nbytes
        #: Records of uncompressed bytes: a batch of them is read by _plain_records.
        self._plain = not schema.is_array and schema.compression == "none"
        self._row_source: Optional[_BlockRows] = None     # fixed-shape rows in blocks: read through this
        #: Where each block of rows lies in the map (0: not looked up yet), so that a read after the
        #: first of its block is a copy out of the map with no B-tree lookup: 8 bytes a block.
        self._block_addresses = np.zeros(0, dtype=np.int64)
        self._crcs: Optional[np.ndarray] = None
        self._keys: Optional[KeyTable] = None
        self._keyed = False             # format version 2: the shard stores keys, read at the first key()
        try:
            with shared.lock:
                self._count, self._labels = self._check_structure(shared)
        except BaseException:
            self.close()
            raise
        finally:
            self._fd = None

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt LMDB shard: {problem}", path=self._path)

    def _check_structure(self, shared: SharedEnv) -> Tuple[int, np.ndarray]:
        try:
            info, stat = shared.env.info(), shared.env.stat()
            if os.path.getsize(fd_path(self._fd, self._path)) < (int(info["last_pgno"]) + 1) * int(stat["psize"]):
                raise self._corrupt("the file is shorter than its pages (truncated)")
            raw = shared.txn.get(META_KEY)
            if raw is None or len(raw) > MAX_META_BYTES:
                raise self._corrupt("no metadata record" if raw is None else "oversized metadata record")
            meta = parse_meta(bytes(raw), self._schema, self._path)
            count = meta["num_samples"]
            values, reserved = count, 2
            if meta["format_version"] >= 2:
                self._per_block = meta["rows_per_block"]
                self.dataset_id = meta["dataset_id"]
                values = -(-count // self._per_block) if self._per_block else count
                reserved = 5 if self._per_block else 4
                if self._per_block:
                    self._block_addresses = np.zeros(values, dtype=np.int64)
                    self._row_source = _BlockRows(self, shared)
                self._keyed = True
            if int(stat["entries"]) != values + reserved:
                raise self._corrupt(f"{stat['entries']} entries for {count} samples")
            labels = shared.txn.get(LABELS_KEY)
            if labels is None or len(labels) != 8 * count:
                raise self._corrupt(f"label table of {None if labels is None else len(labels)} bytes "
                                    f"for {count} samples")
            if self._per_block:
                crcs = shared.txn.get(CRCS_KEY)
                if crcs is None or len(crcs) != 4 * count:
                    raise self._corrupt(f"CRC32 table of {None if crcs is None else len(crcs)} bytes "
                                        f"for {count} samples")
                self._crcs = np.frombuffer(bytes(crcs), dtype="<u4")
            if values:
                cursor = shared.txn.cursor()
                first = bytes(cursor.key()) if cursor.first() else b""
                if first != sample_key(0) or shared.txn.get(sample_key(values - 1)) is None:
                    raise self._corrupt("sample keys are not 0 .. num_samples-1")
            return count, np.frombuffer(bytes(labels), dtype="<i8").astype(np.int64)
        except lmdb.Error as exc:
            raise self._corrupt(short_message(exc, self._path)) from None

    def _value(self, key: bytes) -> Any:
        """A reader of bytes [begin, end) of a reserved value (for the lazily read key table)."""
        def read(begin: int, end: int) -> bytes:
            with self._locked() as shared:
                value = shared.txn.get(key)
                if value is None:
                    raise self._corrupt(f"no {key.decode()} record")
                return bytes(value[begin:end])
        return read

    def _table(self, key: bytes, dtype: str) -> Any:
        def load() -> np.ndarray:
            data = self._value(key)(0, MAX_META_BYTES << 10)
            if len(data) % np.dtype(dtype).itemsize:
                raise self._corrupt(f"{key.decode()} is not a whole number of {dtype} values")
            return np.frombuffer(data, dtype=dtype)
        return load

    def _env(self) -> SharedEnv:
        """The shard's environment; CorruptShardError once this reader is closed."""
        shared = self._shared
        if shared is None:
            raise CorruptShardError("reader is closed", path=self._path)
        return shared

    @contextlib.contextmanager
    def _locked(self) -> Iterator[SharedEnv]:
        shared = self._env()
        with shared.lock:
            try:
                yield shared
            except lmdb.Error as exc:
                raise self._corrupt(short_message(exc, self._path)) from None

    def __len__(self) -> int:
        return self._count

    def read(self, index: int) -> Encoded:
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        if self._per_block:
            return self._read_row(index)
        shared = self._env()
        with shared.lock:       # not _locked(): its generator cost a third of a read; the one LMDB call is caught here
            try:
                value = shared.txn.get(sample_key(index))
            except lmdb.Error as exc:
                raise CorruptSampleError(self._path, index, short_message(exc, self._path)) from None
            return self._record(index, value)

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Samples at local indices under one lock: uncompressed byte records copied into one
        buffer and their headers checked at once (_plain_records), others fetched with one cursor call."""
        wanted = np.asarray(indices, dtype=np.int64)
        if len(wanted) and not (0 <= int(wanted.min()) and int(wanted.max()) < self._count):
            bad = wanted[(wanted < 0) | (wanted >= self._count)][0]
            raise IndexError(f"sample {bad} out of range for shard of {self._count}")
        if self._per_block:
            return [self._read_row(index) for index in indices]
        packed = wanted.astype(">u8").tobytes()      # sample_key() of each, at once
        keys = [packed[start:start + 8] for start in range(0, len(packed), 8)]
        with self._locked() as shared:
            try:
                if self._plain and len(keys) > 1:
                    plain = self._plain_records(shared, wanted, keys)
                    if plain is not None:
                        return plain
                found = shared.txn.cursor().getmulti(keys)
                values: List[Any] = []
                if len(found) == len(keys):
                    values = [value for _, value in found]
                else:       # a key is missing (getmulti skips it): name it
                    values = [shared.txn.get(key) for key in keys]
            except lmdb.Error as exc:
                raise CorruptSampleError(self._path, indices[0], short_message(exc, self._path)) from None
            return [self._record(index, value) for index, value in zip(indices, values)]

    def _plain_records(self, shared: SharedEnv, wanted: np.ndarray, keys: List[bytes]) -> Optional[List[Encoded]]:
        """The records of uncompressed byte payloads (held lock): each value copied into one buffer as
        it is fetched, so no Python object per record outlives the copy (a batch's objects would
        otherwise set off the garbage collector's full passes over a training process's heap), and the
        headers checked at once as _record checks one. None when a record is missing or any header
        fails: the caller reads them one by one, which names the sample."""
        joined, lengths, get = bytearray(), [], shared.txn.get
        for key in keys:
            value = get(key)
            if value is None:
                return None
            lengths.append(len(value))
            joined += value
        sizes = np.asarray(lengths, dtype=np.int64)
        if int(sizes.min()) < RECORD.size:
            return None
        ends = np.cumsum(sizes)
        starts = ends - sizes
        heads = np.frombuffer(joined, dtype=np.uint8)[starts[:, None] + _HEADER_BYTES].view(_HEADER)[:, 0]
        stored, labels = heads["stored"].astype(np.int64), heads["label"]
        if not (np.all(heads["magic"] == RECORD_MAGIC) & np.all(heads["version"] == RECORD_VERSION)
                & np.all(heads["flags"] == 0) & np.all(stored == sizes - RECORD.size)
                & np.all(heads["raw"] == heads["stored"]) & np.all(labels == self._labels[wanted])):
            return None
        whole = bytes(joined)
        return [Encoded(whole[begin:end], label, crc) for begin, end, label, crc in
                zip((starts + RECORD.size).tolist(), ends.tolist(), labels.tolist(), heads["crc"].tolist())]

    def _record(self, index: int, value: Any) -> Encoded:
        """The sample in a record of the map (copied out while mapped), after checking its header."""
        if value is None or len(value) < RECORD.size:
            raise CorruptSampleError(self._path, index, "record is missing" if value is None else
                                     f"record of {len(value)} bytes is shorter than its header")
        magic, version, flags, crc, label, raw_length, stored_length = RECORD.unpack_from(value)
        if magic != RECORD_MAGIC or version != RECORD_VERSION or flags & ~FLAG_ZLIB:
            raise CorruptSampleError(self._path, index, "bad record header")
        if stored_length != len(value) - RECORD.size or label != self._labels[index]:
            raise CorruptSampleError(self._path, index, "record header does not match the record")
        compressed = bool(flags & FLAG_ZLIB)
        check_lengths(self._schema, stored_length, raw_length, compressed, self._path, index)
        stored = value[RECORD.size:]
        if not compressed:
            stored = stored.tobytes()    # copy while mapped: the handle may be evicted later
        payload = restore(self._schema, stored, raw_length, compressed, self._path, index)
        return Encoded(payload, int(label), int(crc))

    def _read_row(self, index: int) -> Encoded:
        """A fixed-shape row (in range) from its block, label and CRC from the tables."""
        assert self._crcs is not None
        return Encoded(self._row(index), self._labels.item(index), self._crcs.item(index))

    def _row(self, index: int) -> np.ndarray:
        """The payload of a fixed-shape row (in range), copied out of its block by the shard's
        row source; CorruptShardError once this reader is closed."""
        self._env()
        row = None if self._row_source is None else self._row_source[index]
        if row is None:
            raise CorruptShardError("reader is closed", path=self._path)
        return row

    def _block_address(self, shared: SharedEnv, block: int, index: int) -> int:
        """Where block lies in the map, after checking that it holds its rows' bytes (held lock)."""
        rows = min(self._per_block, self._count - block * self._per_block)
        try:
            value = shared.txn.get(sample_key(block))
        except lmdb.Error as exc:
            raise CorruptSampleError(self._path, index, short_message(exc, self._path)) from None
        if value is None or len(value) != rows * self._width:
            raise CorruptSampleError(self._path, index, f"block {block} is missing" if value is None else
                                     f"block {block} holds {len(value)} bytes, not {rows * self._width}")
        address = int(np.frombuffer(value, dtype=np.uint8).ctypes.data)
        self._block_addresses[block] = address
        return address

    def payload(self, index: int) -> Any:
        if not self._per_block:
            return super().payload(index)
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        return self._row(index)

    def tables(self) -> Optional[Tuple[np.ndarray, np.ndarray]]:
        return None if self._crcs is None else (self._labels, self._crcs)

    def key(self, index: int) -> Optional[str]:
        if self._keys is None:
            if not self._keyed:
                return super().key(index)
            # Made at the first key(), not at open: its two loaders are closures, and a
            # thousand open shards of a DataLoader worker need none of them.
            self._keys = KeyTable(self._path, self._count, self._table(KEY_BLOCKS_KEY, "<i8"), self._value(KEYS_KEY))
        return self._keys.key(index)

    def labels(self) -> np.ndarray:
        return self._labels

    def close(self) -> None:
        self._shared = None
        self._release()


def parse_meta(raw: bytes, schema: SampleSchema, path: str) -> Dict[str, Any]:
    """The shard's metadata record, checked against the schema; CorruptShardError otherwise."""
    def corrupt(problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt LMDB shard: {problem}", path=path)

    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise corrupt("metadata record is not JSON") from None
    expected = {"shardkit_format": FORMAT_NAME, "layout": schema.layout, "compression": schema.compression,
                "dtype": schema.dtype if schema.is_array else None,
                "shape": list(schema.shape) if schema.is_array else None}
    if not isinstance(meta, dict):
        raise corrupt("metadata record is not a JSON object")
    for name, value in expected.items():
        if meta.get(name) != value:
            raise corrupt(f"metadata {name} is {meta.get(name)!r}, expected {value!r}")
    version, count = meta.get("format_version"), meta.get("num_samples")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise corrupt(f"format version {version!r}; this shardkit reads up to {FORMAT_VERSION}")
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        raise corrupt(f"num_samples is {count!r}")
    if version >= 2:
        if meta.get("rows_per_block") != rows_per_block(schema):
            raise corrupt(f"rows_per_block is {meta.get('rows_per_block')!r}, expected {rows_per_block(schema)}")
        if not isinstance(meta.get("dataset_id"), str):
            raise corrupt("no dataset_id in the metadata")
    return meta


def peek(path: str, schema: SampleSchema, fd: Optional[int] = None) -> Tuple[int, Optional[str]]:
    """(sample count, dataset_id) from a shard's metadata record, after the truncation check (a
    page past the end of the file would kill the process when read): what verify --quick needs,
    one lookup where a reader makes five."""
    key, shared = acquire(path, True, fd, any_readahead=True)
    try:
        with shared.lock:
            try:
                info, stat = shared.env.info(), shared.env.stat()
                size = os.fstat(fd).st_size if fd is not None else os.path.getsize(path)
                if size < (int(info["last_pgno"]) + 1) * int(stat["psize"]):
                    raise CorruptShardError("corrupt LMDB shard: the file is shorter than its pages (truncated)",
                                            path=path)
                value = shared.txn.get(META_KEY)
                raw = None if value is None else bytes(value)
            except lmdb.Error as exc:
                raise CorruptShardError(f"corrupt LMDB shard: {short_message(exc, path)}", path=path) from None
    finally:
        ENVIRONMENTS.release(key, shared)
    if raw is None or len(raw) > MAX_META_BYTES:
        raise CorruptShardError("corrupt LMDB shard: " + ("no metadata record" if raw is None else
                                                          "oversized metadata record"), path=path)
    meta = parse_meta(raw, schema, path)
    return meta["num_samples"], meta.get("dataset_id")
