"""HDF5 shards: payloads packed in one chunked dataset, with offsets, labels and CRC32s.

Layout (formats/hdf5.md is the byte-level contract):
  /data     bytes layout: 1-D uint8, all payloads back to back; array layout: (N, *shape)
  /offsets  int64 (N+1,), sample i is data[offsets[i]:offsets[i+1]] (bytes layout only)
  /labels   int64 (N,), -1 when unlabeled
  /crc32    uint32 (N,)
  attrs     shardkit_format="hdf5", format_version, layout, num_samples
"""
from __future__ import annotations

import mmap
import os
from typing import Any, Dict, List, Optional

import h5py
import numpy as np

from ..errors import CorruptShardError, UsageError
from ..integrity import fsync_path
from ..records import Encoded
from ..schema import COMPRESSIONS, SampleSchema
from .base import ShardFormat, ShardReader, ShardWriter

#: Chunk of the packed byte stream; a random read decompresses at most two of them.
BYTES_CHUNK = {"none": 1 << 20, "gzip": 1 << 17, "lzf": 1 << 17}
#: Target chunk size for fixed-shape arrays (at least one sample per chunk).
ARRAY_CHUNK = {"none": 1 << 20, "gzip": 1 << 16, "lzf": 1 << 16}
#: Reader chunk cache: room for a few chunks; random access gains nothing from more.
CHUNK_CACHE_BYTES = 8 << 20
CHUNK_CACHE_SLOTS = 10007
_WRITE_BLOCK = 64 << 20


def _filter_args(schema: SampleSchema) -> Dict[str, Any]:
    if schema.compression == "gzip":
        return {"compression": "gzip", "compression_opts": 4 if schema.compression_level is None
                else int(schema.compression_level)}
    if schema.compression == "lzf":
        return {"compression": "lzf"}
    return {}


class HDF5Writer(ShardWriter):
    """Buffers a shard's samples, then writes fixed-size datasets in large blocks."""

    def __init__(self, path: str, schema: SampleSchema) -> None:
        self._path = path
        self._schema = schema
        self._payloads: List[Any] = []
        self._labels: List[int] = []
        self._crcs: List[int] = []

    def append(self, sample: Encoded) -> None:
        payload = sample.payload
        if self._schema.is_array:
            payload = np.asarray(payload, dtype=self._schema.dtype)
            if payload.shape != tuple(self._schema.shape):
                raise ValueError(f"array of shape {payload.shape}, schema says {self._schema.shape}")
        self._payloads.append(payload)
        self._labels.append(sample.label)
        self._crcs.append(sample.crc32)

    def close(self) -> None:
        count = len(self._payloads)
        with h5py.File(self._path, "w", track_order=False) as handle:
            handle.attrs["shardkit_format"] = FORMAT.name
            handle.attrs["format_version"] = FORMAT.version
            handle.attrs["layout"] = self._schema.layout
            handle.attrs["num_samples"] = count
            if self._schema.is_array:
                self._write_arrays(handle, count)
            else:
                self._write_bytes(handle, count)
            handle.create_dataset("labels", data=np.asarray(self._labels, dtype=np.int64), track_times=False)
            handle.create_dataset("crc32", data=np.asarray(self._crcs, dtype=np.uint32), track_times=False)
        fsync_path(self._path)
        self._payloads = []

    def _write_bytes(self, handle: h5py.File, count: int) -> None:
        lengths = np.fromiter((len(p) for p in self._payloads), dtype=np.int64, count=count)
        offsets = np.zeros(count + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        total = int(offsets[-1])
        data = _create(handle, "data", (total,), np.uint8, (BYTES_CHUNK[self._schema.compression],),
                       self._schema)
        start = 0
        block: List[Any] = []
        block_bytes = 0
        for payload in self._payloads:
            block.append(payload)
            block_bytes += len(payload)
            if block_bytes >= _WRITE_BLOCK:
                data[start:start + block_bytes] = np.frombuffer(b"".join(block), dtype=np.uint8)
                start += block_bytes
                block, block_bytes = [], 0
        if block_bytes:
            data[start:start + block_bytes] = np.frombuffer(b"".join(block), dtype=np.uint8)
        handle.create_dataset("offsets", data=offsets, track_times=False)

    def _write_arrays(self, handle: h5py.File, count: int) -> None:
        shape = tuple(self._schema.shape)
        per_chunk = max(1, ARRAY_CHUNK[self._schema.compression] // max(1, self._schema.sample_nbytes))
        data = _create(handle, "data", (count, *shape), np.dtype(self._schema.dtype),
                       (per_chunk, *shape), self._schema)
        rows = max(1, _WRITE_BLOCK // max(1, self._schema.sample_nbytes))
        for start in range(0, count, rows):
            data[start:start + rows] = np.stack(self._payloads[start:start + rows])


def _create(handle: h5py.File, name: str, shape: tuple, dtype: Any, chunks: tuple,
            schema: SampleSchema) -> h5py.Dataset:
    """A fixed-size dataset, chunks allocated up front so they lie in order in the file."""
    if shape[0] == 0:
        return handle.create_dataset(name, shape=shape, dtype=dtype, track_times=False)
    chunks = (min(chunks[0], shape[0]), *chunks[1:])
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


class HDF5Reader(ShardReader):
    """Reads samples by index; uncompressed data is served zero-copy from an mmap."""

    def __init__(self, path: str, schema: SampleSchema) -> None:
        self._path = path
        self._schema = schema
        try:
            self._file = h5py.File(path, "r", rdcc_nbytes=CHUNK_CACHE_BYTES, rdcc_nslots=CHUNK_CACHE_SLOTS)
        except (OSError, ValueError) as exc:
            raise CorruptShardError(f"{path}: cannot open HDF5 shard ({_short(exc)})", path=path) from None
        try:
            self._data = self._file["data"]
            self._labels = np.asarray(self._file["labels"][()], dtype=np.int64)
            self._crcs = np.asarray(self._file["crc32"][()], dtype=np.uint32)
            self._offsets = None if schema.is_array else np.asarray(self._file["offsets"][()], dtype=np.int64)
        except (KeyError, OSError, ValueError, TypeError) as exc:
            self._file.close()
            raise CorruptShardError(f"{path}: HDF5 shard is missing or damaged a dataset ({_short(exc)})",
                                    path=path) from None
        self._count = len(self._labels)
        self._flat: Optional[np.ndarray] = None
        self._mmap: Optional[mmap.mmap] = None
        self._check_structure()
        self._map_chunks()

    def _check_structure(self) -> None:
        problem = None
        if len(self._crcs) != self._count:
            problem = f"{len(self._crcs)} CRCs for {self._count} labels"
        elif self._schema.is_array:
            expected = (self._count, *self._schema.shape)
            if tuple(self._data.shape) != expected:
                problem = f"data shape {self._data.shape}, expected {expected}"
        else:
            offsets = self._offsets
            if offsets.ndim != 1 or len(offsets) != self._count + 1:
                problem = f"{len(offsets)} offsets for {self._count} samples"
            elif offsets[0] != 0 or np.any(np.diff(offsets) < 0) or offsets[-1] != self._data.shape[0]:
                problem = "offsets are not increasing within the data"
        if problem:
            self.close()
            raise CorruptShardError(f"{self._path}: corrupt HDF5 shard: {problem}", path=self._path)

    def _map_chunks(self) -> None:
        """mmap uncompressed data and note where each chunk lies in the file.

        HDF5 puts chunk-index nodes between the chunks (one after every 64 with the default
        B-tree), so a large dataset is back to back only in runs of chunks. A sample inside one
        run is served as a zero-copy view; one that straddles a gap is copied from its pieces.
        """
        dset = self._data
        if (dset.size == 0 or dset.chunks is None or dset.compression or dset.shuffle or dset.fletcher32
                or dset.scaleoffset or tuple(dset.chunks[1:]) != tuple(dset.shape[1:])):
            return
        rows = int(dset.chunks[0])
        row_bytes = int(np.prod(dset.shape[1:], dtype=np.int64)) * dset.dtype.itemsize
        chunk_bytes = rows * row_bytes
        count = -(-int(dset.shape[0]) // rows)
        where = np.full(count, -1, dtype=np.int64)

        def note(info: Any) -> None:
            if info.size == chunk_bytes and info.filter_mask == 0:
                where[info.chunk_offset[0] // rows] = info.byte_offset

        dsid = dset.id
        if hasattr(dsid, "chunk_iter"):
            dsid.chunk_iter(note)
        else:
            for k in range(dsid.get_num_chunks()):
                note(dsid.get_chunk_info(k))
        if where.min() < 0 or int(where.max()) + chunk_bytes > os.path.getsize(self._path):
            return
        with open(self._path, "rb") as handle:
            self._mmap = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        self._flat = np.frombuffer(self._mmap, dtype=np.uint8)
        self._chunk_bytes = chunk_bytes
        self._row_bytes = row_bytes
        self._dtype = dset.dtype
        # File position of logical byte x of chunk k is shift[k] + x; chunks of one run share a run id.
        self._shift = (where - np.arange(count, dtype=np.int64) * chunk_bytes).tolist()
        self._run = np.concatenate([[0], np.cumsum(np.diff(where) != chunk_bytes)]).tolist()

    def __len__(self) -> int:
        return self._count

    def read(self, index: int) -> Encoded:
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        if self._flat is None:
            payload = self._data[index] if self._offsets is None else \
                self._data[self._offsets[index]:self._offsets[index + 1]]
        elif self._offsets is None:
            chunk = index * self._row_bytes // self._chunk_bytes
            begin = self._shift[chunk] + index * self._row_bytes
            payload = self._flat[begin:begin + self._row_bytes].view(self._dtype).reshape(self._schema.shape)
        else:
            begin, end = self._offsets[index:index + 2].tolist()
            first = begin // self._chunk_bytes
            if self._run[first] == self._run[max(begin, end - 1) // self._chunk_bytes]:
                shift = self._shift[first]          # one run of back-to-back chunks: a view
                payload = self._flat[shift + begin:shift + end]
            else:
                payload = self._pieces(begin, end)
        return Encoded(payload, int(self._labels[index]), int(self._crcs[index]))

    def _pieces(self, begin: int, end: int) -> np.ndarray:
        """Logical bytes [begin, end) of the packed stream, copied from chunks not back to back."""
        size = self._chunk_bytes
        first, last = begin // size, max(begin, end - 1) // size
        pieces = []
        for chunk in range(first, last + 1):
            low, high = max(begin, chunk * size), min(end, (chunk + 1) * size)
            pieces.append(self._flat[self._shift[chunk] + low:self._shift[chunk] + high])
        return np.concatenate(pieces)

    def labels(self) -> np.ndarray:
        return self._labels

    def close(self) -> None:
        self._flat = None
        if self._mmap is not None:
            try:
                self._mmap.close()
            except BufferError:
                pass  # a returned view still uses it; it closes when that view is freed
            self._mmap = None
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class HDF5Format(ShardFormat):
    """One .h5 file per shard, readable with h5py alone."""

    name = "hdf5"
    version = 1
    extension = ".h5"

    def check(self, schema: SampleSchema) -> None:
        if schema.compression not in COMPRESSIONS:
            raise UsageError(f"hdf5 does not support compression {schema.compression!r}")

    def open_writer(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardWriter:
        return HDF5Writer(path, schema)

    def open_reader(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardReader:
        return HDF5Reader(path, schema)


FORMAT = HDF5Format()
