"""Compressed /data of an HDF5 shard, read chunk by chunk by shardkit rather than HDF5's filters.

HDF5's deflate and lzf filters grow their output until the stream ends, whatever the chunk's
size: a chunk of 1 MB stored inflates to 1 GB, and a filter listed twice multiplies that again.
So each chunk's stored bytes are taken as they are (`read_direct_chunk`, no filter) and inflated
here into a buffer of the chunk's logical size, which the dataset's shape and chunk shape fix
(checked against the schema by hdf5_safety): a stream that would give more, or less, is refused
after at most that many bytes. Every chunk's stored size and place are checked when the shard opens.
"""
from __future__ import annotations

import ctypes
import functools
import math
import zlib
from collections import OrderedDict
from typing import Any, Callable, Dict, Iterator, List

import h5py
import numpy as np

from ..errors import CorruptShardError

#: Decoded chunks a reader keeps (as HDF5's chunk cache did): enough for reads that walk a chunk.
CACHE_BYTES = 8 << 20


def chunk_infos(dsid: Any) -> Iterator[Any]:
    """Every allocated chunk's (chunk_offset, filter_mask, byte_offset, size), from HDF5's chunk
    index (H5Dchunk_iter where h5py has it, one call per chunk otherwise)."""
    if hasattr(dsid, "chunk_iter"):
        found: List[Any] = []
        dsid.chunk_iter(found.append)
        return iter(found)
    return (dsid.get_chunk_info(number) for number in range(dsid.get_num_chunks()))


def stored_limit(chunk_bytes: int) -> int:
    """Most bytes a filtered chunk of chunk_bytes may be stored in: zlib's compressBound (HDF5's
    deflate filter writes at most that; h5py's lzf filter at most chunk_bytes)."""
    return chunk_bytes + (chunk_bytes >> 12) + (chunk_bytes >> 14) + (chunk_bytes >> 25) + 13


def _inflate_zlib(stored: bytes, size: int) -> np.ndarray:
    inflater = zlib.decompressobj()
    out = inflater.decompress(stored, size)
    if len(out) != size or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
        raise ValueError(f"its deflate stream does not hold exactly the chunk's {size} bytes")
    return np.frombuffer(out, dtype=np.uint8)


@functools.lru_cache(maxsize=None)
def _lzf_decoder() -> Callable[..., int]:
    """liblzf's bounded lzf_decompress, as h5py's lzf filter links it (it writes at most out_len
    bytes and returns 0 past them)."""
    function = ctypes.CDLL(h5py.h5z.__file__).lzf_decompress
    function.restype = ctypes.c_uint
    function.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.c_void_p, ctypes.c_uint]
    return function


def _inflate_lzf(stored: bytes, size: int) -> np.ndarray:
    out = np.empty(size, dtype=np.uint8)
    if size and _lzf_decoder()(stored, len(stored), out.ctypes.data, size) != size:
        raise ValueError(f"its lzf stream does not hold exactly the chunk's {size} bytes")
    out.flags.writeable = False
    return out


#: The decoder of each compression's one filter: stored bytes and the logical size -> exactly that
#: many bytes, as a read-only uint8 array.
INFLATE: Dict[str, Callable[[bytes, int], np.ndarray]] = {"gzip": _inflate_zlib, "lzf": _inflate_lzf}


class InflatedChunks:
    """Rows of a chunked, compressed dataset read through bounded decoders; CorruptShardError at
    open for a chunk that is missing, stored past the file or larger than its filter can write."""

    def __init__(self, dset: h5py.Dataset, compression: str, file_size: int, path: str) -> None:
        self._path = path
        self._dsid = dset.id
        self._inflate = INFLATE[compression]
        self._dtype = dset.dtype
        self._row_shape = tuple(dset.shape[1:])
        self._chunk_rows = int(dset.chunks[0])
        self._tail = (0,) * (len(dset.shape) - 1)
        self._chunk_bytes = math.prod(dset.chunks) * dset.dtype.itemsize
        self._cache: "OrderedDict[int, np.ndarray]" = OrderedDict()
        self._cache_slots = max(1, CACHE_BYTES // max(1, self._chunk_bytes))
        self._check_index(-(-int(dset.shape[0]) // self._chunk_rows), file_size)

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt HDF5 shard: /data {problem}", path=self._path)

    def _check_index(self, chunks: int, file_size: int) -> None:
        """Every chunk present once, inside the file, stored in no more than its filter writes
        (all of it when the filter was skipped for that chunk)."""
        seen = np.zeros(chunks, dtype=bool)
        limit = stored_limit(self._chunk_bytes)
        for info in chunk_infos(self._dsid):
            number = info.chunk_offset[0] // self._chunk_rows
            raw = info.filter_mask & 1
            if number >= chunks or seen[number] or info.filter_mask > 1 or info.byte_offset + info.size > file_size \
                    or info.size > limit or (raw and info.size != self._chunk_bytes):
                raise self._corrupt(f"chunk {number} is stored in {info.size} bytes at {info.byte_offset} (filter "
                                    f"mask {info.filter_mask}); a chunk of {self._chunk_bytes} bytes takes at most "
                                    f"{limit}, inside the file's {file_size}")
            seen[number] = True
        if not seen.all():
            raise self._corrupt(f"chunk {int(np.argmin(seen))} is missing")

    def __getitem__(self, key: "int | slice") -> np.ndarray:
        """Row `key`, or the rows of slice `key` (in range, no step), as a new array: what indexing
        the h5py dataset gives."""
        if isinstance(key, slice):
            return self.rows(int(key.start), int(key.stop))
        return self.rows(int(key), int(key) + 1)[0]

    def rows(self, begin: int, end: int) -> np.ndarray:
        """Rows [begin, end) of the dataset (in range), as a new array (the cached chunk stays as read)."""
        if end <= begin:
            return np.zeros((0, *self._row_shape), dtype=self._dtype)
        first, last = begin // self._chunk_rows, (end - 1) // self._chunk_rows
        pieces = []
        for number in range(first, last + 1):
            base = number * self._chunk_rows
            pieces.append(self._chunk(number)[max(begin, base) - base:min(end, base + self._chunk_rows) - base])
        return pieces[0].copy() if len(pieces) == 1 else np.concatenate(pieces)

    def _chunk(self, number: int) -> np.ndarray:
        cached = self._cache.get(number)
        if cached is not None:
            self._cache.move_to_end(number)
            return cached
        mask, stored = self._dsid.read_direct_chunk((number * self._chunk_rows, *self._tail))
        try:
            data = np.frombuffer(stored, dtype=np.uint8) if mask & 1 else self._inflate(stored, self._chunk_bytes)
        except ValueError as exc:
            raise self._corrupt(f"chunk {number}: {exc}") from None
        chunk = data.view(self._dtype).reshape((self._chunk_rows, *self._row_shape))
        self._cache[number] = chunk
        if len(self._cache) > self._cache_slots:
            self._cache.popitem(last=False)
        return chunk
