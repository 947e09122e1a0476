"""Writing an LMDB shard: records (or blocks of rows) appended in large transactions in key
order, the map grown as needed, the tables and metadata last (layout in lmdb_layout.py)."""
from __future__ import annotations

import json
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

import lmdb
import numpy as np

from ..records import Encoded, EncodedRows
from ..schema import SampleSchema
from .base import ShardWriter
from .keys import KeyPacker
from .lmdb_layout import (CRCS_KEY, FLAG_ZLIB, FORMAT_NAME, FORMAT_VERSION, KEY_BLOCKS_KEY, KEYS_KEY, LABELS_KEY,
                          META_KEY, RECORD, RECORD_MAGIC, RECORD_VERSION, rows_per_block, sample_key,
                          sample_keys)
from .packing import BytesLike, add_columns, compress, compress_run, payload_bytes, raw_rows, run_bytes

#: The writer's first map size; it doubles whenever the next batch might not fit.
INITIAL_MAP_SIZE = 16 << 20
#: One write transaction per this many payload bytes (or values): bounded memory, few commits.
BATCH_BYTES = 32 << 20
BATCH_SAMPLES = 65536


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
            self._add([sample_key(self._values)], [header + stored])
            self._values += 1
        self._labels.append(int(sample.label))
        self._crcs.append(int(sample.crc32) & 0xFFFFFFFF)
        self._keys.add(sample.key)

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """A block of fixed-shape rows goes into the row blocks at once, a run of byte strings into
        records in one loop (the same bytes as append() on each)."""
        if isinstance(samples, EncodedRows) and isinstance(samples.payloads, list) and not self._per_block:
            self._append_records(samples)
            return
        rows = raw_rows(self._schema, samples) if self._per_block else None
        if rows is None:
            super().append_many(samples)
            return
        assert isinstance(samples, EncodedRows)
        self._add_rows(memoryview(rows.reshape(-1)), len(rows))
        add_columns(self._labels, self._crcs, self._keys, samples)

    def _append_records(self, samples: EncodedRows) -> None:
        """One record per sample of a run whose payloads are byte strings, added at once."""
        assert isinstance(samples.payloads, list)
        raws = run_bytes(self._schema, samples.payloads)
        stored, compressed = compress_run(self._schema, raws)
        pack, flags = RECORD.pack, FLAG_ZLIB if compressed else 0
        values = [pack(RECORD_MAGIC, RECORD_VERSION, flags, crc, label, len(raw), len(one)) + one
                  for crc, label, raw, one in zip(samples.crcs.tolist(), samples.labels.tolist(), raws, stored)]
        self._add(sample_keys(self._values, len(values)), values)
        self._values += len(values)
        add_columns(self._labels, self._crcs, self._keys, samples)

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
        self._add([sample_key(self._values)], [bytes(self._block)])
        self._values += 1
        self._block = bytearray()
        self._held = 0

    def _add(self, keys: List[bytes], values: List[bytes]) -> None:
        """Add records (in key order) to the batch, writing it wherever it fills: after the record
        that takes it to BATCH_BYTES, or to BATCH_SAMPLES records."""
        lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        key_lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        start = 0
        while start < len(values):
            ends = self._batch_bytes + np.cumsum(lengths[start:])
            take = min(int(np.searchsorted(ends, BATCH_BYTES)) + 1, BATCH_SAMPLES - len(self._batch),
                       len(values) - start)
            stop = start + take
            self._batch += zip(keys[start:stop], values[start:stop])
            self._batch_bytes = int(ends[take - 1])
            self._batch_need += self._need(key_lengths[start:stop], lengths[start:stop])
            if self._batch_bytes >= BATCH_BYTES or len(self._batch) >= BATCH_SAMPLES:
                self._flush()
            start = stop

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

    def _need(self, key_lengths: np.ndarray, value_lengths: np.ndarray) -> int:
        """Generous bytes records need: an overflow value takes whole pages, small ones share leaves."""
        pages = -(-(value_lengths + 16) // self._psize) * self._psize
        return int(np.where(value_lengths > self._psize // 2, pages, key_lengths + value_lengths + 16).sum())

    def close(self) -> None:
        if self._env is None:
            return
        if self._held:
            self._store_block()
        count = len(self._labels)
        meta = {"shardkit_format": FORMAT_NAME, "format_version": FORMAT_VERSION, "layout": self._schema.layout,
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
        self._batch_need = self._need(np.array([len(key) for key, _ in self._batch], dtype=np.int64),
                                      np.array([len(value) for _, value in self._batch], dtype=np.int64))
        self._flush()
        self._env.close()       # unsynced: the sink fsyncs the file before it counts
        self._env = None

    def abort(self) -> None:
        if self._env is not None:
            self._env.close()
            self._env = None
        self._batch = []
        self._batch_bytes = self._batch_need = 0
