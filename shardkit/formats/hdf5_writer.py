"""Writes an HDF5 shard: payloads buffered in memory, written in large blocks at close, then
sealed with the locator in the userblock (formats/hdf5.md)."""
from __future__ import annotations

import sys
from array import array
from typing import Any, Dict, Sequence, Tuple

import h5py
import numpy as np

from ..records import Encoded, EncodedRows
from ..schema import SampleSchema
from .base import ShardWriter
from .hdf5_layout import FORMAT_NAME, FORMAT_VERSION, chunk_limit
from .hdf5_locator import locate, seal, userblock_size
from .keys import KeyPacker
from .packing import add_columns, add_offsets, run_bytes

WRITE_BLOCK = 64 << 20
#: array typecode of the writer's CRC32 list: 4-byte unsigned (half the memory of int64 per sample).
_U32 = next(code for code in "IL" if array(code).itemsize == 4)


def _filter_args(schema: SampleSchema) -> Dict[str, Any]:
    if schema.compression == "gzip":
        return {"compression": "gzip", "compression_opts": 4 if schema.compression_level is None
                else int(schema.compression_level)}
    if schema.compression == "lzf":
        return {"compression": "lzf"}
    return {}


class HDF5Writer(ShardWriter):
    """Packs a shard's payloads into one byte buffer (about one byte of memory per stored byte),
    then writes fixed-size datasets in large blocks at close()."""

    def __init__(self, path: str, schema: SampleSchema, dataset_id: str) -> None:
        self._path = path
        self._schema = schema
        self._dataset_id = dataset_id
        self._data = bytearray()
        self._offsets = array("q", [0])
        self._labels = array("q")
        self._crcs = array(_U32)
        self._keys = KeyPacker()

    def append(self, sample: Encoded) -> None:
        payload = sample.payload
        if self._schema.is_array:
            payload = np.ascontiguousarray(payload, dtype=self._schema.dtype)
            if payload.shape != tuple(self._schema.shape):
                raise ValueError(f"array of shape {payload.shape}, schema says {self._schema.shape}")
        self._data += memoryview(payload).cast("B") if isinstance(payload, np.ndarray) else payload
        if not self._schema.is_array:        # arrays are cut by shape: no offsets (8 bytes a sample)
            self._offsets.append(len(self._data))
        self._labels.append(sample.label)
        self._crcs.append(sample.crc32)
        self._keys.add(sample.key)

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """Fixed-shape arrays stacked into one block, a run of byte strings packed in one loop
        (the same bytes as append() on each)."""
        if not self._schema.is_array and isinstance(samples, EncodedRows) and isinstance(samples.payloads, list):
            raws = run_bytes(self._schema, samples.payloads)
            add_offsets(self._offsets, len(self._data), raws)
            self._data += b"".join(raws)
            add_columns(self._labels, self._crcs, self._keys, samples)
            return
        if not self._schema.is_array or not samples:
            super().append_many(samples)
            return
        try:
            payloads = samples.payloads if isinstance(samples, EncodedRows) else \
                np.stack([sample.payload for sample in samples])
            block = np.ascontiguousarray(payloads, dtype=self._schema.dtype)
        except (ValueError, TypeError):
            block = None
        if block is None or block.shape[1:] != tuple(self._schema.shape) or not block.nbytes:
            super().append_many(samples)    # append() names the sample that does not fit
            return
        self._data += memoryview(block.reshape(-1).view(np.uint8))
        if isinstance(samples, EncodedRows):
            add_columns(self._labels, self._crcs, self._keys, samples)
        else:
            self._labels.extend([sample.label for sample in samples])
            self._crcs.extend([sample.crc32 for sample in samples])
            self._keys.extend([sample.key for sample in samples], len(samples))

    def close(self) -> None:
        count = len(self._labels)
        pieces = _chunking(count if self._schema.is_array else len(self._data), self._chunk_rows())[1]
        userblock = userblock_size(pieces, self._dataset_id)
        with h5py.File(self._path, "w", track_order=False, locking=False, userblock_size=userblock) as handle:
            handle.attrs["shardkit_format"] = FORMAT_NAME
            handle.attrs["format_version"] = FORMAT_VERSION
            handle.attrs["layout"] = self._schema.layout
            handle.attrs["num_samples"] = count
            handle.attrs["dataset_id"] = self._dataset_id
            flat = np.frombuffer(self._data, dtype=np.uint8)
            if self._schema.is_array:
                shape = tuple(self._schema.shape)
                rows = flat.view(np.dtype(self._schema.dtype)).reshape(count, *shape)
                data = _create(handle, "data", (count, *shape), rows.dtype, (self._chunk_rows(), *shape),
                               self._schema)
                step = max(1, WRITE_BLOCK // max(1, self._schema.sample_nbytes))
            else:
                rows = flat
                data = _create(handle, "data", (len(flat),), np.uint8, (self._chunk_rows(),), self._schema)
                step = WRITE_BLOCK
                handle.create_dataset("offsets", data=np.frombuffer(self._offsets, dtype=np.int64),
                                      track_times=False)
            for first in range(0, len(rows), step):
                data[first:first + step] = rows[first:first + step]
            del flat, rows
            handle.create_dataset("labels", data=np.frombuffer(self._labels, dtype=np.int64), track_times=False)
            handle.create_dataset("crc32", data=np.frombuffer(self._crcs, dtype=np.uint32),
                                  track_times=False)
            key_data, key_blocks = self._keys.finish()
            handle.create_dataset("keys", data=np.frombuffer(key_data, dtype=np.uint8), track_times=False)
            handle.create_dataset("key_blocks", data=key_blocks, track_times=False)
            locator = locate(handle, self._schema.compression == "none" and sys.byteorder == "little",
                             self._dataset_id, userblock)
        seal(self._path, locator)
        self.abort()

    def _chunk_rows(self) -> int:
        """Rows of /data per chunk before they are evened out (_chunking): as many as chunk_limit
        holds, at least one."""
        return max(1, chunk_limit(self._schema) // max(1, self._schema.sample_nbytes))

    def abort(self) -> None:
        """Drop the buffered samples: nothing reaches the file before close(), so there is
        nothing to flush (a Ctrl-C or a full disk must not write the whole shard first)."""
        self._data = bytearray()
        self._offsets, self._labels, self._crcs = array("q", [0]), array("q"), array(_U32)
        self._keys = KeyPacker()


def _chunking(rows: int, limit: int) -> Tuple[int, int]:
    """(rows per chunk, chunks) of a dataset of `rows` rows cut into chunks of at most `limit` rows,
    all equal: the last one wastes (almost) nothing."""
    if rows == 0:
        return limit, 0
    pieces = -(-rows // limit)
    return -(-rows // pieces), pieces


def _create(handle: h5py.File, name: str, shape: tuple, dtype: Any, chunks: tuple,
            schema: SampleSchema) -> h5py.Dataset:
    """A fixed-size dataset, chunks allocated up front so they lie in order in the file."""
    if shape[0] == 0:
        return handle.create_dataset(name, shape=shape, dtype=dtype, track_times=False)
    chunks = (_chunking(shape[0], chunks[0])[0], *chunks[1:])
    dcpl_kwargs = _filter_args(schema)
    if not dcpl_kwargs:
        # Early allocation keeps uncompressed chunks contiguous, which lets readers mmap them.
        space = h5py.h5s.create_simple(shape)
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk(chunks)
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        dcpl.set_obj_track_times(False)
        dsid = h5py.h5d.create(handle.id, name.encode(), h5py.h5t.py_create(np.dtype(dtype)), space,
                               dcpl=dcpl)
        return h5py.Dataset(dsid)
    return handle.create_dataset(name, shape=shape, dtype=dtype, chunks=chunks, track_times=False,
                                 **dcpl_kwargs)
