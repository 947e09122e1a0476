"""LMDB shards: one environment file per shard (subdir=False), one record per sample, or one
block of rows per value for uncompressed fixed-shape samples (version 2 on).

Layout (formats/lmdb.md is the byte-level contract):
  8-byte big-endian index -> a record: 32-byte header + payload (zlib stream when flagged), or
                             a block: rows_per_block rows' bytes back to back, no header
  b"__crc32__"            -> uint32 CRC32 of every sample (blocks only)
  b"__key_blocks__", b"__keys__" -> the sample keys (formats/keys.md)
  b"__labels__"           -> int64 little-endian label of every sample, in index order
  b"__meta__"             -> UTF-8 JSON: shardkit_format, format_version, layout, dtype, shape,
                             compression, num_samples, rows_per_block, dataset_id
Keys sort in sample order, so the writer appends; no pickle anywhere.

py-lmdb allows one environment per file and process, so readers of the same file share one
read-only environment through the process's registry (openfiles.py, reference counted); an
environment inherited over fork is closed in the child before the child opens its own
(read-only and lock-free, that touches only the child).
"""
from __future__ import annotations

import contextlib
import json
import os
import struct
import threading
from array import array
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import lmdb
import numpy as np

from ..errors import CorruptSampleError, CorruptShardError, UsageError
from ..openfiles import OPEN_FILES
from ..records import Encoded, EncodedRows
from ..schema import SampleSchema
from .base import FormatOptions, ReadaheadOptions, ShardFormat, ShardReader, ShardWriter, readahead_by_size
from .keys import KeyPacker, KeyTable
from .packing import (BytesLike, check_lengths, check_per_sample_compression, compress, payload_bytes, raw_rows,
                      restore)

META_KEY = b"__meta__"
LABELS_KEY = b"__labels__"
CRCS_KEY = b"__crc32__"
KEYS_KEY = b"__keys__"
KEY_BLOCKS_KEY = b"__key_blocks__"
#: magic b"SK", record version, flags, crc32, label, raw (uncompressed) length, stored length.
RECORD = struct.Struct("<2sBBIqQQ")
RECORD_MAGIC = b"SK"
RECORD_VERSION = 1
FLAG_ZLIB = 0x01
#: Largest block of fixed-shape rows in one value: 16 pages of 4 KiB less the overflow page header.
BLOCK_BYTES = 16 * 4096 - 16
#: The writer's first map size; it doubles whenever the next batch might not fit.
INITIAL_MAP_SIZE = 16 << 20
#: One write transaction per this many payload bytes (or values): bounded memory, few commits.
BATCH_BYTES = 32 << 20
BATCH_SAMPLES = 65536
MAX_META_BYTES = 1 << 20
#: Reader table size; readers open lock-free, so it never limits them (kept generous anyway).
MAX_READERS = 1024


def rows_per_block(schema: SampleSchema) -> int:
    """Samples per value: uncompressed fixed-shape rows are stored in blocks of up to BLOCK_BYTES
    without a header (0: one record with a header per sample)."""
    if not schema.is_array or schema.compression != "none":
        return 0
    return max(1, BLOCK_BYTES // max(1, schema.sample_nbytes))


def sample_key(index: int) -> bytes:
    """The key of record (or block) index: 8 bytes, big-endian, so keys sort in sample order."""
    return int(index).to_bytes(8, "big")


def _open_for_writing(path: str, map_size: int) -> lmdb.Environment:
    kwargs: Dict[str, Any] = dict(subdir=False, map_size=map_size, lock=False, sync=False, metasync=False,
                                  readahead=False, meminit=True, max_dbs=0)
    try:
        # py-lmdb >= 3 bundles two LMDB engines; pin the 0.9 data format every lmdb reads.
        return lmdb.open(path, lib_version=0, **kwargs)
    except TypeError:
        return lmdb.open(path, **kwargs)


class LMDBWriter(ShardWriter):
    """Appends records (or blocks of rows) in large transactions, growing the map as needed;
    the tables and metadata go last."""

    def __init__(self, path: str, schema: SampleSchema, dataset_id: str) -> None:
        self._path = path
        self._schema = schema
        self._dataset_id = dataset_id
        self._env: Optional[lmdb.Environment] = _open_for_writing(path, INITIAL_MAP_SIZE)
        self._map_size = INITIAL_MAP_SIZE
        self._psize = int(self._env.stat()["psize"])
        self._batch: List[Tuple[bytes, bytes]] = []
        self._batch_bytes = self._batch_need = 0
        self._labels = array("q")
        self._crcs = array("q")
        self._keys = KeyPacker()
        self._per_block = rows_per_block(schema)
        self._block = bytearray()
        self._held = 0          # rows in the open block
        self._values = 0

    def append(self, sample: Encoded) -> None:
        raw = payload_bytes(self._schema, sample.payload)
        if self._per_block:
            self._add_rows(raw, 1)
        else:
            stored, compressed = compress(self._schema, raw)
            header = RECORD.pack(RECORD_MAGIC, RECORD_VERSION, FLAG_ZLIB if compressed else 0,
                                 int(sample.crc32) & 0xFFFFFFFF, int(sample.label), len(raw), len(stored))
            self._add(sample_key(self._values), header + stored)
            self._values += 1
        self._labels.append(int(sample.label))
        self._crcs.append(int(sample.crc32) & 0xFFFFFFFF)
        self._keys.add(sample.key)

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """A block of fixed-shape rows goes into the row blocks at once (the same bytes as append())."""
        rows = raw_rows(self._schema, samples) if self._per_block else None
        if rows is None:
            super().append_many(samples)
            return
        assert isinstance(samples, EncodedRows)
        self._add_rows(memoryview(rows.reshape(-1)), len(rows))
        self._labels.extend(samples.labels)
        self._crcs.extend(crc & 0xFFFFFFFF for crc in samples.crcs)
        self._keys.extend(samples.keys, len(samples))

    def _add_rows(self, data: BytesLike, count: int) -> None:
        """Add `count` rows' bytes to the open block, storing every block that fills."""
        width = self._schema.sample_nbytes
        position = 0
        while position < count:
            take = min(count - position, self._per_block - self._held)
            self._block += data[position * width:(position + take) * width]
            position += take
            self._held += take
            if self._held == self._per_block:
                self._store_block()

    def _store_block(self) -> None:
        self._add(sample_key(self._values), bytes(self._block))
        self._values += 1
        self._block = bytearray()
        self._held = 0

    def _add(self, key: bytes, value: bytes) -> None:
        self._batch.append((key, value))
        self._batch_bytes += len(value)
        self._batch_need += self._need(len(key), len(value))
        if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_SAMPLES:
            self._flush()

    def _flush(self) -> None:
        """Write the batch in one transaction, doubling the map first if it might not fit."""
        if not self._batch or self._env is None:
            return
        used = (int(self._env.info()["last_pgno"]) + 1) * self._psize
        need = used + self._estimate()
        if self._map_size < need:
            while self._map_size < need:
                self._map_size *= 2
            self._env.set_mapsize(self._map_size)
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    txn.cursor().putmulti(self._batch, append=True)
                break
            except lmdb.MapFullError:
                self._map_size *= 2
                self._env.set_mapsize(self._map_size)
        self._batch = []
        self._batch_bytes = self._batch_need = 0

    def _estimate(self) -> int:
        """Generous bytes the batch needs, from the needs of its records."""
        return self._batch_need + self._batch_need // 8 + 16 * self._psize

    def _need(self, key_length: int, value_length: int) -> int:
        """Generous bytes a record needs: an overflow value takes whole pages, small ones share leaves."""
        if value_length > self._psize // 2:
            return -(-(value_length + 16) // self._psize) * self._psize
        return key_length + value_length + 16

    def close(self) -> None:
        if self._env is None:
            return
        if self._held:
            self._store_block()
        count = len(self._labels)
        meta = {"shardkit_format": FORMAT.name, "format_version": FORMAT.version, "layout": self._schema.layout,
                "dtype": self._schema.dtype if self._schema.is_array else None,
                "shape": list(self._schema.shape) if self._schema.is_array else None,
                "compression": self._schema.compression, "num_samples": count,
                "rows_per_block": self._per_block, "dataset_id": self._dataset_id}
        labels = np.frombuffer(self._labels, dtype=np.int64).astype("<i8").tobytes() if count else b""
        key_data, key_blocks = self._keys.finish()
        self._flush()
        self._batch = [(CRCS_KEY, np.frombuffer(self._crcs, dtype=np.int64).astype("<u4").tobytes())] \
            if self._per_block else []
        self._batch += [(KEY_BLOCKS_KEY, key_blocks.astype("<i8").tobytes()), (KEYS_KEY, key_data),
                        (LABELS_KEY, labels),
                        (META_KEY, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())]
        self._batch_need = sum(self._need(len(key), len(value)) for key, value in self._batch)
        self._flush()
        self._env.sync(True)
        self._env.close()
        self._env = None

    def abort(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._batch = []
        self._batch_bytes = self._batch_need = 0


class _SharedEnv:
    """One read-only environment of this process with its long-lived read transaction."""

    def __init__(self, env: lmdb.Environment, readahead: bool) -> None:
        self.env = env
        self.txn = env.begin(buffers=True)
        self.readahead = readahead
        self.lock = threading.Lock()

    def close(self) -> None:
        """Close the environment (and its transaction)."""
        with self.lock:
            self.close_inherited()

    def close_inherited(self) -> None:
        """Close an environment inherited over fork: unmaps the child's copy only, and skips the
        lock, which a thread of the parent may have held at the fork."""
        try:
            self.env.close()
        except lmdb.Error:
            pass


def _acquire(path: str, readahead: bool) -> Tuple[Tuple[Any, ...], _SharedEnv]:
    """The process's environment for the file at path (opened on first use; py-lmdb allows one
    environment per file and process, so every reader of the file shares it)."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise CorruptShardError(f"cannot open LMDB shard ({exc.strerror})", path=path) from None
    if stat.st_size == 0:
        raise CorruptShardError("not a readable LMDB shard (empty file)", path=path)
    key = (stat.st_dev, stat.st_ino, "lmdb-env")

    def opener() -> _SharedEnv:
        try:
            env = lmdb.open(path, subdir=False, readonly=True, lock=False, meminit=False, create=False,
                            readahead=readahead, max_readers=MAX_READERS, max_dbs=0)
        except lmdb.Error as exc:
            raise CorruptShardError(f"not a readable LMDB shard ({_short(exc, path)})", path=path) from None
        return _SharedEnv(env, readahead)

    shared = OPEN_FILES.acquire(key, opener)
    if shared.readahead != readahead:
        OPEN_FILES.release(key, shared)
        raise UsageError(f"already open in this process with readahead={shared.readahead}; LMDB "
                         "allows one environment per file and process, so close the other dataset first "
                         f"to read it with readahead={readahead}", path=path)
    return key, shared


class LMDBReader(ShardReader):
    """Random access by key through the mmap'd environment; payloads are copied out of the map
    (an evicted handle unmaps it), array payloads come back as read-only arrays."""

    def __init__(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> None:
        self._path = path
        self._schema = schema
        self._shared: Optional[_SharedEnv] = None
        self._key, shared = _acquire(path, bool(options.get("readahead", True)))
        self._shared = shared
        #: Whether this shard's map uses OS readahead.
        self.readahead = shared.readahead
        self._per_block = 0
        self._crcs: Optional[np.ndarray] = None
        self._keys: Optional[KeyTable] = None
        try:
            with shared.lock:
                self._count, self._labels = self._check_structure(shared)
        except BaseException:
            self.close()
            raise

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt LMDB shard: {problem}", path=self._path)

    def _check_structure(self, shared: _SharedEnv) -> Tuple[int, np.ndarray]:
        try:
            info, stat = shared.env.info(), shared.env.stat()
            if os.path.getsize(self._path) < (int(info["last_pgno"]) + 1) * int(stat["psize"]):
                raise self._corrupt("the file is shorter than its pages (truncated)")
            raw = shared.txn.get(META_KEY)
            if raw is None or len(raw) > MAX_META_BYTES:
                raise self._corrupt("no metadata record" if raw is None else "oversized metadata record")
            meta = self._parse_meta(bytes(raw))
            count = meta["num_samples"]
            values, reserved = count, 2
            if meta["format_version"] >= 2:
                self._per_block = meta["rows_per_block"]
                self.dataset_id = meta["dataset_id"]
                values = -(-count // self._per_block) if self._per_block else count
                reserved = 5 if self._per_block else 4
                self._keys = KeyTable(self._path, count, self._table(KEY_BLOCKS_KEY, "<i8"), self._value(KEYS_KEY))
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
            raise self._corrupt(_short(exc, self._path)) from None

    def _parse_meta(self, raw: bytes) -> Dict[str, Any]:
        try:
            meta = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise self._corrupt("metadata record is not JSON") from None
        schema = self._schema
        expected = {"shardkit_format": FORMAT.name, "layout": schema.layout, "compression": schema.compression,
                    "dtype": schema.dtype if schema.is_array else None,
                    "shape": list(schema.shape) if schema.is_array else None}
        if not isinstance(meta, dict):
            raise self._corrupt("metadata record is not a JSON object")
        for name, value in expected.items():
            if meta.get(name) != value:
                raise self._corrupt(f"metadata {name} is {meta.get(name)!r}, expected {value!r}")
        version, count = meta.get("format_version"), meta.get("num_samples")
        if not isinstance(version, int) or not 1 <= version <= FORMAT.version:
            raise self._corrupt(f"format version {version!r}; this shardkit reads up to {FORMAT.version}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise self._corrupt(f"num_samples is {count!r}")
        if version >= 2:
            if meta.get("rows_per_block") != rows_per_block(schema):
                raise self._corrupt(f"rows_per_block is {meta.get('rows_per_block')!r}, expected "
                                    f"{rows_per_block(schema)}")
            if not isinstance(meta.get("dataset_id"), str):
                raise self._corrupt("no dataset_id in the metadata")
        return meta

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

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_SharedEnv]:
        shared = self._shared
        if shared is None:
            raise CorruptShardError("reader is closed", path=self._path)
        with shared.lock:
            try:
                yield shared
            except lmdb.Error as exc:
                raise self._corrupt(_short(exc, self._path)) from None

    def __len__(self) -> int:
        return self._count

    def read(self, index: int) -> Encoded:
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        if self._per_block:
            return self._read_row(index)
        with self._locked() as shared:
            try:
                value = shared.txn.get(sample_key(index))
            except lmdb.Error as exc:
                raise CorruptSampleError(self._path, index, _short(exc, self._path)) from None
            return self._record(index, value)

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Samples at local indices under one lock, fetched with one cursor call."""
        keys = []
        for index in indices:
            if not 0 <= index < self._count:
                raise IndexError(f"sample {index} out of range for shard of {self._count}")
            keys.append(sample_key(index))
        if self._per_block:
            return [self._read_row(index) for index in indices]
        with self._locked() as shared:
            try:
                found = shared.txn.cursor().getmulti(keys)
                values: List[Any] = []
                if len(found) == len(keys):
                    values = [value for _, value in found]
                else:       # a key is missing (getmulti skips it): name it
                    values = [shared.txn.get(key) for key in keys]
            except lmdb.Error as exc:
                raise CorruptSampleError(self._path, indices[0], _short(exc, self._path)) from None
            return [self._record(index, value) for index, value in zip(indices, values)]

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
        """A fixed-shape row from its block (label and CRC from the tables)."""
        block, position = divmod(index, self._per_block)
        width = self._schema.sample_nbytes
        rows = min(self._per_block, self._count - block * self._per_block)
        with self._locked() as shared:
            try:
                value = shared.txn.get(sample_key(block))
            except lmdb.Error as exc:
                raise CorruptSampleError(self._path, index, _short(exc, self._path)) from None
            if value is None or len(value) != rows * width:
                raise CorruptSampleError(self._path, index, f"block {block} is missing" if value is None else
                                         f"block {block} holds {len(value)} bytes, not {rows * width}")
            stored = value[position * width:(position + 1) * width].tobytes()
        payload = restore(self._schema, stored, width, False, self._path, index)
        assert self._crcs is not None
        return Encoded(payload, int(self._labels[index]), int(self._crcs[index]))

    def key(self, index: int) -> Optional[str]:
        return super().key(index) if self._keys is None else self._keys.key(index)

    def labels(self) -> np.ndarray:
        return self._labels

    def close(self) -> None:
        shared, self._shared = self._shared, None
        if shared is not None:
            OPEN_FILES.release(self._key, shared)


def _short(exc: BaseException, path: str) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.replace(f"{path}: ", "")


class LMDBFormat(ShardFormat):
    """One .lmdb environment file per shard, readable with the lmdb package alone."""

    reader_options = ReadaheadOptions
    name = "lmdb"
    version = 2
    keys_since = 2
    extension = ".lmdb"
    crafted_files_crash = True     # LMDB trusts its page and node sizes (docs/reliability.md)
    fixed_bytes = 32 << 10      # meta and root pages, reserved values (measured ~20 KiB)

    def check(self, schema: SampleSchema) -> None:
        check_per_sample_compression(self.name, schema)

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        return readahead_by_size(total_bytes)

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Rows in blocks: the row, label (8) and CRC32 (4), plus one page of padding per block of at
        most 16 pages. Records: header (32) and label (8), and either whole 4 KiB overflow pages
        (values over about 2 KiB) or a leaf node (18) on pages filled at least 15/16."""
        payload = np.asarray(payload_bytes, dtype=np.int64)
        if rows_per_block(schema):
            return payload + payload // 256 + 12 + 4112 // rows_per_block(schema)
        value = payload + 32
        overflow = -(-(value + 16) // 4096) * 4096 + 64
        return np.where(value > 2000, overflow, (value + 18) * 16 // 15 + 1) + 8

    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        return LMDBWriter(path, schema, dataset_id)

    def open_reader(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardReader:
        return LMDBReader(path, schema, options)


FORMAT = LMDBFormat()
