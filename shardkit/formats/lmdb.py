"""LMDB shards: one environment file per shard (subdir=False), one record per sample.

Layout (formats/lmdb.md is the byte-level contract):
  8-byte big-endian sample index -> 32-byte record header + payload (zlib stream when flagged)
  b"__labels__"                  -> int64 little-endian label of every sample, in index order
  b"__meta__"                    -> UTF-8 JSON: shardkit_format, format_version, layout, dtype, shape,
                                    compression, num_samples
Keys sort in sample order, so the writer appends; no pickle anywhere.

py-lmdb allows one environment per file and process, so readers of the same file share one
read-only environment through the process's registry (openfiles.py, reference counted); an
environment inherited over fork is closed in the child before the child opens its own
(read-only and lock-free, that touches only the child).
"""
from __future__ import annotations

import json
import os
import struct
import threading
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

import lmdb
import numpy as np

from ..errors import CorruptShardError, UsageError
from ..integrity import fsync_path
from ..openfiles import OPEN_FILES
from ..records import Encoded, EncodedRows
from ..schema import SampleSchema
from .base import ShardFormat, ShardReader, ShardWriter, readahead_by_size
from .packing import check_lengths, check_per_sample_compression, compress, payload_bytes, raw_rows, restore

META_KEY = b"__meta__"
LABELS_KEY = b"__labels__"
#: magic b"SK", record version, flags, crc32, label, raw (uncompressed) length, stored length.
RECORD = struct.Struct("<2sBBIqQQ")
RECORD_MAGIC = b"SK"
RECORD_VERSION = 1
FLAG_ZLIB = 0x01
#: The writer's first map size; it doubles whenever the next batch might not fit.
INITIAL_MAP_SIZE = 16 << 20
#: One write transaction per this many payload bytes (or samples): bounded memory, few commits.
BATCH_BYTES = 32 << 20
BATCH_SAMPLES = 65536
MAX_META_BYTES = 1 << 20
#: Reader table size; readers open lock-free, so it never limits them (kept generous anyway).
MAX_READERS = 1024


def _record_dtype(width: int) -> np.dtype:
    """RECORD's header fields followed by a payload of `width` bytes, as one numpy record."""
    return np.dtype([("magic", "S2"), ("version", "u1"), ("flags", "u1"), ("crc32", "<u4"), ("label", "<i8"),
                     ("raw_length", "<u8"), ("stored_length", "<u8"), ("payload", "u1", (width,))])


def sample_key(index: int) -> bytes:
    """The key of sample index: 8 bytes, big-endian, so keys sort in sample order."""
    return index.to_bytes(8, "big")


def _open_for_writing(path: str, map_size: int) -> lmdb.Environment:
    kwargs: Dict[str, Any] = dict(subdir=False, map_size=map_size, lock=False, sync=False, metasync=False,
                                  readahead=False, meminit=True, max_dbs=0)
    try:
        # py-lmdb >= 3 bundles two LMDB engines; pin the 0.9 data format every lmdb reads.
        return lmdb.open(path, lib_version=0, **kwargs)
    except TypeError:
        return lmdb.open(path, **kwargs)


class LMDBWriter(ShardWriter):
    """Appends records in large transactions, growing the map as needed; metadata goes last."""

    def __init__(self, path: str, schema: SampleSchema) -> None:
        self._path = path
        self._schema = schema
        self._env: Optional[lmdb.Environment] = _open_for_writing(path, INITIAL_MAP_SIZE)
        self._map_size = INITIAL_MAP_SIZE
        self._psize = int(self._env.stat()["psize"])
        self._batch: List[Tuple[bytes, bytes]] = []
        self._batch_bytes = self._batch_need = 0
        self._labels = array("q")

    def append(self, sample: Encoded) -> None:
        raw = payload_bytes(self._schema, sample.payload)
        stored, compressed = compress(self._schema, raw)
        header = RECORD.pack(RECORD_MAGIC, RECORD_VERSION, FLAG_ZLIB if compressed else 0,
                             int(sample.crc32) & 0xFFFFFFFF, int(sample.label), len(raw), len(stored))
        self._add(sample_key(len(self._labels)), header + stored)
        self._labels.append(int(sample.label))

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """A block of uncompressed fixed-shape rows gets its records built at once (the same
        bytes as append() on each)."""
        rows = raw_rows(self._schema, samples) if self._schema.compression == "none" else None
        if rows is None:
            super().append_many(samples)
            return
        assert isinstance(samples, EncodedRows)
        count, width = rows.shape
        records = np.zeros(count, dtype=_record_dtype(width))
        records["magic"], records["version"] = RECORD_MAGIC, RECORD_VERSION
        records["crc32"] = np.asarray(samples.crcs, dtype=np.int64) & 0xFFFFFFFF
        records["label"] = samples.labels
        records["raw_length"] = records["stored_length"] = width
        records["payload"] = rows
        data = records.tobytes()
        first = len(self._labels)
        keys = np.arange(first, first + count, dtype=">u8").tobytes()
        self._add_uniform(keys, data, records.itemsize, count)
        self._labels.extend(samples.labels)

    def _add(self, key: bytes, value: bytes) -> None:
        self._batch.append((key, value))
        self._batch_bytes += len(value)
        self._batch_need += self._need(len(key), len(value))
        if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_SAMPLES:
            self._flush()

    def _add_uniform(self, keys: bytes, data: bytes, size: int, count: int) -> None:
        """_add() of `count` 8-byte keys and `size`-byte values packed back to back, flushing after
        exactly the same records as _add() on each would."""
        index = 0
        while index < count:
            room = max(1, -(-(BATCH_BYTES - self._batch_bytes) // max(1, size)))
            take = min(BATCH_SAMPLES - len(self._batch), room, count - index)
            self._batch.extend((keys[at * 8:at * 8 + 8], data[at * size:(at + 1) * size])
                               for at in range(index, index + take))
            self._batch_bytes += take * size
            self._batch_need += take * self._need(8, size)
            index += take
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
        count = len(self._labels)
        meta = {"shardkit_format": FORMAT.name, "format_version": FORMAT.version, "layout": self._schema.layout,
                "dtype": self._schema.dtype if self._schema.is_array else None,
                "shape": list(self._schema.shape) if self._schema.is_array else None,
                "compression": self._schema.compression, "num_samples": count}
        labels = np.frombuffer(self._labels, dtype=np.int64).astype("<i8").tobytes() if count else b""
        self._flush()
        self._batch = [(LABELS_KEY, labels),
                       (META_KEY, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())]
        self._batch_need = sum(self._need(len(key), len(value)) for key, value in self._batch)
        self._flush()
        self._env.sync(True)
        self._env.close()
        self._env = None
        fsync_path(self._path)

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
        raise CorruptShardError(f"{path}: cannot open LMDB shard ({exc.strerror})", path=path) from None
    if stat.st_size == 0:
        raise CorruptShardError(f"{path}: not a readable LMDB shard (empty file)", path=path)
    key = (stat.st_dev, stat.st_ino, "lmdb-env")

    def opener() -> _SharedEnv:
        try:
            env = lmdb.open(path, subdir=False, readonly=True, lock=False, meminit=False, create=False,
                            readahead=readahead, max_readers=MAX_READERS, max_dbs=0)
        except lmdb.Error as exc:
            raise CorruptShardError(f"{path}: not a readable LMDB shard ({_short(exc, path)})", path=path) from None
        return _SharedEnv(env, readahead)

    shared = OPEN_FILES.acquire(key, opener)
    if shared.readahead != readahead:
        OPEN_FILES.release(key, shared)
        raise UsageError(f"{path}: already open in this process with readahead={shared.readahead}; LMDB "
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
        try:
            with shared.lock:
                self._count, self._labels = self._check_structure(shared)
        except BaseException:
            self.close()
            raise

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"{self._path}: corrupt LMDB shard: {problem}", path=self._path)

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
            if int(stat["entries"]) != count + 2:
                raise self._corrupt(f"{stat['entries']} entries for {count} samples")
            labels = shared.txn.get(LABELS_KEY)
            if labels is None or len(labels) != 8 * count:
                raise self._corrupt(f"label table of {None if labels is None else len(labels)} bytes "
                                    f"for {count} samples")
            if count:
                cursor = shared.txn.cursor()
                first = bytes(cursor.key()) if cursor.first() else b""
                if first != sample_key(0) or shared.txn.get(sample_key(count - 1)) is None:
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
        return meta

    def __len__(self) -> int:
        return self._count

    def read(self, index: int) -> Encoded:
        return self.read_many((index,))[0]

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Samples at local indices under one lock, fetched with one cursor call."""
        keys = []
        for index in indices:
            if not 0 <= index < self._count:
                raise IndexError(f"sample {index} out of range for shard of {self._count}")
            keys.append(sample_key(index))
        shared = self._shared
        if shared is None:
            raise CorruptShardError(f"{self._path}: reader is closed", path=self._path)
        with shared.lock:
            try:
                found = shared.txn.cursor().getmulti(keys) if len(keys) > 1 else ()
                if len(found) == len(keys):
                    values = [value for _, value in found]
                else:       # one key, or a key missing (getmulti skips it): name it
                    values = [shared.txn.get(key) for key in keys]
            except lmdb.Error as exc:
                raise self._corrupt(f"sample {indices[0]}: {_short(exc, self._path)}") from None
            return [self._record(index, value) for index, value in zip(indices, values)]

    def _record(self, index: int, value: Any) -> Encoded:
        """The sample in a record of the map (copied out while mapped), after checking its header."""
        if value is None or len(value) < RECORD.size:
            raise self._corrupt(f"sample {index} is missing" if value is None else
                                f"sample {index}: record of {len(value)} bytes is shorter than its header")
        magic, version, flags, crc, label, raw_length, stored_length = RECORD.unpack_from(value)
        if magic != RECORD_MAGIC or version != RECORD_VERSION or flags & ~FLAG_ZLIB:
            raise self._corrupt(f"sample {index}: bad record header")
        if stored_length != len(value) - RECORD.size or label != self._labels[index]:
            raise self._corrupt(f"sample {index}: record header does not match the record")
        compressed = bool(flags & FLAG_ZLIB)
        check_lengths(self._schema, stored_length, raw_length, compressed, self._path, index)
        stored = value[RECORD.size:]
        if not compressed:
            stored = stored.tobytes()    # copy while mapped: the handle may be evicted later
        payload = restore(self._schema, stored, raw_length, compressed, self._path, index)
        return Encoded(payload, int(label), int(crc))

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

    name = "lmdb"
    version = 1
    extension = ".lmdb"

    def check(self, schema: SampleSchema) -> None:
        check_per_sample_compression(self.name, schema)

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        return readahead_by_size(total_bytes)

    def open_writer(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardWriter:
        return LMDBWriter(path, schema)

    def open_reader(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardReader:
        return LMDBReader(path, schema, options)


FORMAT = LMDBFormat()
