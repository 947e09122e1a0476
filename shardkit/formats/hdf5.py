"""HDF5 shards: payloads packed in one chunked dataset, with offsets, labels and CRC32s.

Layout (formats/hdf5.md is the byte-level contract):
  /data     bytes layout: 1-D uint8, all payloads back to back; array layout: (N, *shape)
  /offsets  int64 (N+1,), sample i is data[offsets[i]:offsets[i+1]] (bytes layout only)
  /labels   int64 (N,), -1 when unlabeled
  /crc32    uint32 (N,)
  /keys, /key_blocks  the sample keys (formats/keys.md), version 2 on
  attrs     shardkit_format="hdf5", format_version, layout, num_samples, dataset_id (version 2 on)
"""
from __future__ import annotations

import math
import mmap
import os
import sys
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

import h5py
import numpy as np

from ..errors import CorruptShardError, UsageError
from ..records import Encoded, EncodedRows
from ..schema import COMPRESSIONS, SampleSchema
from .base import FormatOptions, ReadaheadOptions, ShardFormat, ShardReader, ShardWriter, readahead_by_size
from .hdf5_locator import Locator, describes, disagreement, locate, parse, read_head, seal, userblock_size
from .keys import KeyPacker, KeyTable
from .locating import close_map, map_if

#: Chunk of the packed byte stream; a random read decompresses at most two of them.
BYTES_CHUNK = {"none": 1 << 20, "gzip": 1 << 17, "lzf": 1 << 17}
#: Target chunk size for fixed-shape arrays (at least one sample per chunk).
ARRAY_CHUNK = {"none": 1 << 20, "gzip": 1 << 16, "lzf": 1 << 16}
#: Reader chunk cache: room for a few chunks; random access gains nothing from more.
CHUNK_CACHE_BYTES = 8 << 20
CHUNK_CACHE_SLOTS = 10007
#: Upper bound of how much larger gzip or lzf data can be than its stored bytes (deflate's
#: limit is about 1032:1): a dataset claiming more is not backed by the file.
MAX_EXPANSION = 1100
_WRITE_BLOCK = 64 << 20
#: Largest chunk a reader accepts (the writer's are at most 1 MiB, or one sample when a sample is
#: larger): reading one byte inflates its whole chunk, so a crafted huge chunk is a memory bomb.
MAX_CHUNK_BYTES = 4 << 20
#: Filters a shard may use: built into HDF5 and h5py, never loaded from a plugin library.
SAFE_FILTERS = frozenset({h5py.h5z.FILTER_DEFLATE, h5py.h5z.FILTER_SHUFFLE, h5py.h5z.FILTER_FLETCHER32,
                          h5py.h5z.FILTER_LZF})
_STORED_LAYOUTS = (h5py.h5d.CONTIGUOUS, h5py.h5d.CHUNKED, h5py.h5d.COMPACT)
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
        """Fixed-shape arrays stacked into one block (the same bytes as append() on each)."""
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
            self._labels.extend(samples.labels)
            self._crcs.extend(samples.crcs)
            self._keys.extend(samples.keys, len(samples))
        else:
            self._labels.extend([sample.label for sample in samples])
            self._crcs.extend([sample.crc32 for sample in samples])
            self._keys.extend([sample.key for sample in samples], len(samples))

    def close(self) -> None:
        count = len(self._labels)
        pieces = _chunking(count if self._schema.is_array else len(self._data), self._chunk_rows())[1]
        userblock = userblock_size(pieces, self._dataset_id)
        with h5py.File(self._path, "w", track_order=False, locking=False, userblock_size=userblock) as handle:
            handle.attrs["shardkit_format"] = FORMAT.name
            handle.attrs["format_version"] = FORMAT.version
            handle.attrs["layout"] = self._schema.layout
            handle.attrs["num_samples"] = count
            handle.attrs["dataset_id"] = self._dataset_id
            flat = np.frombuffer(self._data, dtype=np.uint8)
            if self._schema.is_array:
                shape = tuple(self._schema.shape)
                rows = flat.view(np.dtype(self._schema.dtype)).reshape(count, *shape)
                data = _create(handle, "data", (count, *shape), rows.dtype, (self._chunk_rows(), *shape),
                               self._schema)
                step = max(1, _WRITE_BLOCK // max(1, self._schema.sample_nbytes))
            else:
                rows = flat
                data = _create(handle, "data", (len(flat),), np.uint8, (self._chunk_rows(),), self._schema)
                step = _WRITE_BLOCK
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
        """Rows of /data per chunk before they are evened out (_chunking)."""
        if self._schema.is_array:
            return max(1, ARRAY_CHUNK[self._schema.compression] // max(1, self._schema.sample_nbytes))
        return BYTES_CHUNK[self._schema.compression]

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


def disable_filter_plugins() -> None:
    """Empty HDF5's plugin search path, so no filter plugin library (from HDF5_PLUGIN_PATH or
    the default folders) can be loaded into this process by a shard naming its filter id."""
    while h5py.h5pl.size():
        h5py.h5pl.remove(0)


def check_self_contained(handle: h5py.File) -> None:
    """Raise ValueError unless every member of the file is a hard link to a dataset whose bytes
    are in this file: no soft or external links, external raw storage, virtual layouts, filters
    outside SAFE_FILTERS, chunks over MAX_CHUNK_BYTES (or one row) or larger than the dataset.

    A shard's checksum covers only its own bytes, so anything it reads from elsewhere would get
    around verify; and a chunk is inflated whole on every read. Called wherever a shard opens.
    """
    for name in handle.id:                      # low-level: no high-level objects per member
        kind = handle.id.links.get_info(name).type
        if kind != h5py.h5l.TYPE_HARD:
            link = {h5py.h5l.TYPE_SOFT: "SoftLink", h5py.h5l.TYPE_EXTERNAL: "ExternalLink"}.get(kind, "user link")
            raise ValueError(f"/{name.decode(errors='replace')} is a {link}; only datasets stored in the shard "
                             "are read")
        dsid = h5py.h5o.open(handle.id, name)
        if not isinstance(dsid, h5py.h5d.DatasetID):
            raise ValueError(f"/{name.decode(errors='replace')} is not a dataset")
        _check_storage(name.decode(errors="replace"), dsid)


def _check_storage(name: str, dsid: Any) -> None:
    dcpl = dsid.get_create_plist()
    layout = dcpl.get_layout()
    if layout not in _STORED_LAYOUTS:
        raise ValueError(f"/{name} has a virtual layout (its data lives in other files)")
    if dcpl.get_external_count():
        raise ValueError(f"/{name} keeps its data in external files")
    for number in range(dcpl.get_nfilters()):
        code = dcpl.get_filter(number)[0]
        if code not in SAFE_FILTERS:
            raise ValueError(f"/{name} uses HDF5 filter {code}, which shardkit does not read")
    if layout != h5py.h5d.CHUNKED:
        return
    # plain ints and the type's size: numpy here (np.prod, dsid.dtype) cost more than the HDF5 calls
    chunks, shape, itemsize = tuple(dcpl.get_chunk()), tuple(dsid.shape), dsid.get_type().get_size()
    row_bytes = math.prod(shape[1:]) * itemsize
    chunk_bytes = math.prod(chunks) * itemsize
    if any(chunk > max(1, size) for chunk, size in zip(chunks, shape)) \
            or chunk_bytes > max(MAX_CHUNK_BYTES, row_bytes):
        raise ValueError(f"/{name} has chunks of {chunks} ({chunk_bytes} bytes) for shape {shape}; "
                         f"chunks may not exceed the dataset or {MAX_CHUNK_BYTES} bytes")


class HDF5Reader(ShardReader):
    """Reads samples by index; uncompressed data is served zero-copy from an mmap.

    An uncompressed shard is read through h5py only while it opens (structure checks, tables, chunk
    addresses); then the HDF5 file is closed and the reader holds one descriptor, the map's.

    The file is untrusted: every dataset's type, shape and storage is checked before any of
    it is read, so crafted offsets, counts or sizes raise CorruptShardError instead of
    allocating what they claim (see _check_dataset).
    """

    def __init__(self, path: str, schema: SampleSchema, readahead: bool = True, located: bool = True) -> None:
        self._path = path
        self._schema = schema
        self._readahead = readahead
        self._flat: Optional[np.ndarray] = None
        self._mmap: Optional[mmap.mmap] = None
        self._file: Any = None
        self._data: Any = None          # the h5py dataset of the payloads (None once mapped and closed)
        self._key_datasets: Tuple[Any, ...] = ()
        self._keys: Optional[KeyTable] = None
        if located and self._open_located():
            return
        disable_filter_plugins()
        try:
            # locking=False: shards are immutable once renamed into place, and NFS/Lustre mounts
            # without (working) flock would otherwise fail every open
            self._file = h5py.File(path, "r", rdcc_nbytes=CHUNK_CACHE_BYTES, rdcc_nslots=CHUNK_CACHE_SLOTS,
                                   locking=False)
        except (OSError, ValueError, RuntimeError) as exc:
            raise CorruptShardError(f"cannot open HDF5 shard ({_short(exc)})", path=path) from None
        try:
            check_self_contained(self._file)
        except (ValueError, KeyError, OSError, RuntimeError) as exc:
            self.close()
            raise CorruptShardError(f"unsafe HDF5 shard: {_short(exc)}", path=path) from None
        try:
            self._load_tables()
            self._map_chunks()
            if self._flat is not None and self._map_keys():
                # Everything a read needs is mapped or in memory: the map's descriptor is the only one.
                self._file.close()
                self._file = self._data = None
        except CorruptShardError:
            self.close()
            raise
        except (KeyError, IndexError, OSError, ValueError, TypeError, RuntimeError, AttributeError) as exc:
            self.close()
            raise CorruptShardError(f"HDF5 shard is missing or damaged a dataset ({_short(exc)})",
                                    path=path) from None

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt HDF5 shard: {problem}", path=self._path)

    def _open_located(self) -> bool:
        """Open through the locator in the userblock (format version 3): one pread, one mmap,
        no HDF5. False when the shard has none, keeps its data compressed, or was changed after
        it was written (then h5py opens it with every structure check)."""
        try:
            handle = open(self._path, "rb")
        except OSError:
            return False            # h5py reports it
        with handle:
            found = _located(handle.fileno(), self._path)
        if found is None:
            return False
        locator, view = found
        self._use_map(view)
        try:
            self._use_locator(locator)
        except BaseException:
            self.close()
            raise
        return True

    def _use_locator(self, locator: Locator) -> None:
        """Tables as views of the map, checked as the h5py path checks them."""
        flat = self._flat
        assert flat is not None

        def table(name: str, dtype: str) -> np.ndarray:
            offset, size = locator.tables[name]
            return flat[offset:offset + size].view(dtype)

        if self._schema.is_array and locator.row_bytes != self._schema.sample_nbytes:
            raise self._corrupt(f"rows of {locator.row_bytes} bytes, the schema's arrays have "
                                f"{self._schema.sample_nbytes}")
        if not self._schema.is_array and locator.row_bytes != 1:
            raise self._corrupt(f"rows of {locator.row_bytes} bytes in the bytes layout")
        self._count = locator.count
        self.dataset_id = locator.dataset_id
        self._labels = table("labels", "<i8")
        self._crcs = table("crc32", "<u4")
        self._offsets = None if self._schema.is_array else table("offsets", "<i8")
        self._data_bytes = locator.data_bytes
        self._check_structure()
        key_data, key_blocks = table("keys", "u1"), table("key_blocks", "<i8")
        self._keys = KeyTable(self._path, self._count, lambda: key_blocks,
                              lambda begin, end: key_data[begin:end].tobytes())
        self._use_chunks(locator.chunks, max(1, locator.chunk_bytes), locator.row_bytes,
                         np.dtype(self._schema.dtype) if self._schema.is_array else np.dtype(np.uint8))

    def _map(self, fileno: int) -> None:
        self._use_map(mmap.mmap(fileno, 0, access=mmap.ACCESS_READ))

    def _use_map(self, view: mmap.mmap) -> None:
        self._mmap = view
        if not self._readahead and hasattr(mmap, "MADV_RANDOM"):
            # A dataset much larger than RAM: fault in only the pages a sample needs.
            self._mmap.madvise(mmap.MADV_RANDOM)
        self._flat = np.frombuffer(self._mmap, dtype=np.uint8)

    def _use_chunks(self, where: np.ndarray, chunk_bytes: int, row_bytes: int, dtype: np.dtype) -> None:
        """Serve reads from the map, chunk k of /data lying at file offset where[k]."""
        count = len(where)
        self._chunk_bytes = chunk_bytes
        self._row_bytes = row_bytes
        self._dtype = dtype
        # File position of logical byte x of chunk k is shift[k] + x; chunks of one run share a run id.
        self._shift = (where - np.arange(count, dtype=np.int64) * chunk_bytes).tolist() or [0]
        self._run = np.concatenate([[0], np.cumsum(np.diff(where) != chunk_bytes)]).tolist()

    def _load_tables(self) -> None:
        """Check the attributes and every dataset's metadata, then read the small tables."""
        version = self._file.attrs.get("format_version", FORMAT.version)
        if not isinstance(version, (int, np.integer)) or int(version) > FORMAT.version:
            raise CorruptShardError(f"HDF5 shard format version {version!r} is newer than this "
                                    f"shardkit reads ({FORMAT.version}); upgrade shardkit", path=self._path)
        file_size = os.path.getsize(self._path)
        labels = self._check_dataset("labels", "iu", 1, file_size)
        self._count = int(labels.shape[0])
        crcs = self._check_dataset("crc32", "iu", 1, file_size, rows=self._count)
        if self._schema.is_array:
            self._data = self._check_dataset("data", np.dtype(self._schema.dtype).kind, 1 + len(self._schema.shape),
                                             file_size, rows=self._count)
            if tuple(self._data.shape[1:]) != tuple(self._schema.shape):
                raise self._corrupt(f"data shape {self._data.shape}, expected ({self._count}, "
                                    f"{', '.join(map(str, self._schema.shape))})")
            offsets = None
        else:
            self._data = self._check_dataset("data", "u", 1, file_size)
            if self._data.dtype.itemsize != 1:
                raise self._corrupt(f"data has type {self._data.dtype}, expected uint8")
            offsets = self._check_dataset("offsets", "iu", 1, file_size, rows=self._count + 1)
        self._labels = np.asarray(labels[()], dtype=np.int64)
        self._crcs = np.asarray(crcs[()], dtype=np.uint32)
        if int(version) >= 2:
            self.dataset_id = self._file.attrs.get("dataset_id")
            if isinstance(self.dataset_id, bytes):
                self.dataset_id = self.dataset_id.decode("utf-8", "replace")
            if not isinstance(self.dataset_id, str):
                raise self._corrupt("no dataset_id attribute")
            key_data = self._check_dataset("keys", "u", 1, file_size)
            key_blocks = self._check_dataset("key_blocks", "i", 1, file_size)
            self._key_datasets = (key_data, key_blocks)
            self._keys = KeyTable(self._path, self._count, lambda: key_blocks[()],
                                  lambda begin, end: key_data[begin:end].tobytes())
        self._offsets = None if offsets is None else np.asarray(offsets[()], dtype=np.int64)
        self._data_bytes = int(self._data.shape[0])
        self._check_structure()

    def _check_dataset(self, name: str, kinds: str, ndim: int, file_size: int,
                       rows: Optional[int] = None) -> h5py.Dataset:
        """The dataset `name`, if its type, rank, length and stored bytes are plausible.

        A dataset's elements must be backed by bytes in this file: its allocated storage
        cannot exceed the file, and its logical size cannot exceed that storage (times the
        largest gzip/lzf expansion when it is compressed). So a shape claiming terabytes in
        a small file is refused before anything of that size is allocated.
        """
        dset = self._file.get(name)
        if not isinstance(dset, h5py.Dataset):
            raise self._corrupt(f"no dataset /{name}")
        if dset.dtype.kind not in kinds or dset.ndim != ndim:
            raise self._corrupt(f"/{name} has an unexpected type or rank ({dset.dtype}, {dset.ndim}-D)")
        if rows is not None and dset.shape[0] != rows:
            raise self._corrupt(f"/{name} has {dset.shape[0]} rows, expected {rows}")
        nbytes = int(np.prod(dset.shape, dtype=np.float64) * dset.dtype.itemsize)
        stored = int(dset.id.get_storage_size())
        expansion = MAX_EXPANSION if dset.compression or dset.shuffle or dset.fletcher32 else 1
        if stored > file_size or nbytes > stored * expansion:
            raise self._corrupt(f"/{name} claims {nbytes} bytes but the file stores {stored} of its "
                                f"{file_size} bytes for it")
        return dset

    def _check_structure(self) -> None:
        if self._schema.is_array:
            return
        offsets = self._offsets
        if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
            raise self._corrupt("offsets are negative, decreasing or overlapping")
        if offsets[-1] != self._data_bytes:
            raise self._corrupt(f"offsets end at {offsets[-1]}, the data holds {self._data_bytes} bytes")

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
            self._map(handle.fileno())
        self._use_chunks(where, chunk_bytes, row_bytes, dset.dtype)

    def _map_keys(self) -> bool:
        """Point the key table at the map (so h5py may close); False when a key dataset is not
        stored contiguously inside the file (then h5py stays open to read it)."""
        if self._keys is None:
            return True
        key_data, key_blocks = (self._mapped(dset) for dset in self._key_datasets)
        if key_data is None or key_blocks is None:
            return False
        self._keys = KeyTable(self._path, self._count, lambda: key_blocks,
                              lambda begin, end: key_data[begin:end].tobytes())
        self._key_datasets = ()
        return True

    def _mapped(self, dset: h5py.Dataset) -> Optional[np.ndarray]:
        """A contiguous, unfiltered 1-D dataset as a read-only view of the map, or None."""
        if dset.size == 0:
            return np.zeros(0, dtype=dset.dtype)
        offset = dset.id.get_offset() if dset.chunks is None else None
        nbytes = int(dset.size) * dset.dtype.itemsize
        assert self._flat is not None
        if offset is None or offset + nbytes > len(self._flat):
            return None
        return self._flat[offset:offset + nbytes].view(dset.dtype)

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

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Mapped bytes payloads as slices of the map, all located at once; else read() on each."""
        if self._flat is None or self._offsets is None:
            return super().read_many(indices)
        wanted = np.asarray(indices, dtype=np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= self._count):
            bad = wanted[(wanted < 0) | (wanted >= self._count)][0]
            raise IndexError(f"sample {bad} out of range for shard of {self._count}")
        begins, ends = self._offsets[wanted], self._offsets[wanted + 1]
        first = begins // self._chunk_bytes
        last = np.maximum(begins, ends - 1) // self._chunk_bytes
        runs = np.asarray(self._run)
        shifts = np.asarray(self._shift, dtype=np.int64)[first]
        whole = (runs[first] == runs[last]).tolist()
        flat = self._flat
        out = []
        for begin, end, shift, one_run, label, crc in zip(begins.tolist(), ends.tolist(), shifts.tolist(), whole,
                                                          self._labels[wanted].tolist(),
                                                          self._crcs[wanted].tolist()):
            payload = flat[shift + begin:shift + end] if one_run else self._pieces(begin, end)
            out.append(Encoded(payload, label, crc))
        return out

    def _pieces(self, begin: int, end: int) -> np.ndarray:
        """Logical bytes [begin, end) of the packed stream, copied from chunks not back to back."""
        size = self._chunk_bytes
        first, last = begin // size, max(begin, end - 1) // size
        pieces = []
        for chunk in range(first, last + 1):
            low, high = max(begin, chunk * size), min(end, (chunk + 1) * size)
            pieces.append(self._flat[self._shift[chunk] + low:self._shift[chunk] + high])
        return np.concatenate(pieces)

    def key(self, index: int) -> Optional[str]:
        return super().key(index) if self._keys is None else self._keys.key(index)

    def labels(self) -> np.ndarray:
        return self._labels

    def close(self) -> None:
        self._flat = None
        self._keys = None           # its views of the map would keep the map open
        if self._file is None and self._mmap is not None:   # tables are views of the map too
            self._labels, self._crcs = np.zeros(0, np.int64), np.zeros(0, np.uint32)
            self._offsets = None if getattr(self, "_offsets", None) is None else np.zeros(1, np.int64)
        close_map(self._mmap)
        self._mmap = None
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class HDF5Format(ShardFormat):
    """One .h5 file per shard, readable with h5py alone."""

    reader_options = ReadaheadOptions
    name = "hdf5"
    version = 3
    keys_since = 2
    extension = ".h5"
    fixed_bytes = 16 << 10      # superblock, object headers, attributes, small tables (measured ~12 KiB)

    def check(self, schema: SampleSchema) -> None:
        if schema.compression not in COMPRESSIONS:
            raise UsageError(f"hdf5 does not support compression {schema.compression!r}")

    def default_options(self, schema: SampleSchema, total_bytes: int) -> Dict[str, Any]:
        """Readahead of the mmap'd data on while the dataset fits comfortably in RAM, off beyond."""
        return readahead_by_size(total_bytes)

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Payload + label (8) + CRC32 (4) + offset (8, bytes layout) + chunk-index nodes (one of
        about 2 KiB per 64 chunks; chunks are at least 64 KiB)."""
        tables = 12 if schema.is_array else 20
        payload = np.asarray(payload_bytes, dtype=np.int64)
        return payload + payload // 1024 + tables

    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        return HDF5Writer(path, schema, dataset_id)

    def open_reader(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardReader:
        return HDF5Reader(path, schema, readahead=bool(options.get("readahead", True)))

    def peek(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> Tuple[int, Optional[str]]:
        """From the locator (one pread, checked) when the shard has one that still describes the
        file (its metadata CRC32, as a reader checks it); else by opening it with every structure
        check, so a shard edited with HDF5 tools after it was written is looked at in full."""
        with open(path, "rb") as handle:
            found = _located(handle.fileno(), path)
        if found is None:
            return super().peek(path, schema, options)
        locator, view = found
        view.close()
        return locator.count, locator.dataset_id

    def cross_check(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> Optional[str]:
        """Open the shard through h5py with every structure check, and compare its locator (when it
        has one that describes the file) with the one HDF5's view of the file gives."""
        HDF5Reader(path, schema, located=False).close()
        with open(path, "rb") as handle:
            raw = read_head(handle.fileno(), path)
            size = os.fstat(handle.fileno()).st_size
            data = handle.read() if raw is not None else b""
        if raw is None:
            return None
        recorded = parse(raw, path, size)
        if not describes(recorded, memoryview(data), size):
            return None         # changed after it was written: readers ignore it and use h5py
        with h5py.File(path, "r", locking=False) as shard:
            try:
                actual = locate(shard, recorded.mapped, _attr_text(shard.attrs.get("dataset_id")),
                                recorded.userblock)
            except (ValueError, KeyError, TypeError) as exc:
                return f"locator describes data HDF5 does not hold ({_short(exc)})"
        problem = disagreement(recorded, actual)
        return None if problem is None else f"locator disagrees with the HDF5 structure: {problem}"


def _located(fd: int, path: str) -> Optional[Tuple[Locator, mmap.mmap]]:
    """A version-3 shard's locator and a read-only map of the file, when the locator maps the
    data and still describes the file (what a reader and peek may trust); None otherwise, and
    h5py reads the shard. CorruptShardError when the locator itself is damaged."""
    raw = read_head(fd, path)
    if raw is None:
        return None
    size = os.fstat(fd).st_size
    locator = parse(raw, path, size)
    if not locator.mapped:
        return None
    view = map_if(fd, lambda flat: describes(locator, flat, size))
    return None if view is None else (locator, view)


def _attr_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


FORMAT = HDF5Format()
