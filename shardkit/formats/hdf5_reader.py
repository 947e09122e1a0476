"""Reads an HDF5 shard: through the locator and one mmap when it has one that still describes the
file (version 3, uncompressed), else through h5py after every structure check."""
from __future__ import annotations

import math
import mmap
import os
from typing import Any, List, Optional, Sequence, Tuple

import h5py
import numpy as np

from ..errors import CorruptShardError
from ..integrity import fd_path
from ..records import Encoded, Payload
from ..schema import SampleSchema
from .base import TableShardReader
from .hdf5_layout import FORMAT_VERSION, MAX_EXPANSION
from .hdf5_locator import FIRST_READ, Locator, describes, parse, read_head
from .hdf5_chunks import InflatedChunks, chunk_infos
from .hdf5_safety import check_self_contained, disable_filter_plugins
from .keys import KeyTable
from .locating import FileView, close_map, map_file, map_rows, opened

#: Reader chunk cache: room for a few chunks; random access gains nothing from more.
CHUNK_CACHE_BYTES = 8 << 20
CHUNK_CACHE_SLOTS = 10007


class HDF5Reader(TableShardReader):
    """Reads samples by index; uncompressed data is served zero-copy from an mmap.

    An uncompressed shard is read through h5py only while it opens (structure checks, tables, chunk
    addresses); then the HDF5 file is closed and the reader holds one descriptor, the map's.

    The file is untrusted: every dataset's type, shape and storage is checked before any of
    it is read, so crafted offsets, counts or sizes raise CorruptShardError instead of
    allocating what they claim (see _check_dataset).
    """

    def __init__(self, path: str, schema: SampleSchema, readahead: bool = True, located: bool = True,
                 fd: Optional[int] = None) -> None:
        self._path = path
        self._fd = fd                   # the caller's descriptor of path, used only while opening
        self._schema = schema
        self.readahead = readahead
        self._flat: Optional[np.ndarray] = None
        self._rows = None           # fixed-shape rows of one run of chunks, as one view (_one_run_rows)
        self._mmap: Optional[mmap.mmap] = None
        self._file: Any = None
        self._data: Any = None          # the h5py dataset of the payloads (None once mapped and closed)
        self._inflated: Optional[InflatedChunks] = None     # compressed /data, read by bounded decoders
        self._key_datasets: Tuple[Any, ...] = ()
        self._keys: Optional[KeyTable] = None
        if located and self._open_located():
            self._fd = None
            return
        disable_filter_plugins()
        try:
            # locking=False: shards are immutable once renamed into place, and NFS/Lustre mounts
            # without (working) flock would otherwise fail every open
            self._file = h5py.File(fd_path(fd, path), "r", rdcc_nbytes=CHUNK_CACHE_BYTES,
                                   rdcc_nslots=CHUNK_CACHE_SLOTS, locking=False)
        except (OSError, ValueError, RuntimeError) as exc:
            raise CorruptShardError(f"cannot open HDF5 shard ({short_error(exc)})", path=path) from None
        try:
            check_self_contained(self._file, schema)
        except (ValueError, KeyError, OSError, RuntimeError) as exc:
            self.close()
            raise CorruptShardError(f"unsafe HDF5 shard: {short_error(exc)}", path=path) from None
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
            raise CorruptShardError(f"HDF5 shard is missing or damaged a dataset ({short_error(exc)})",
                                    path=path) from None
        self._fd = None

    @property
    def inheritable(self) -> bool:
        """Read through its map alone: h5py closed once the data was mapped, or never opened (the
        locator)."""
        return self._file is None

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt HDF5 shard: {problem}", path=self._path)

    def _open_located(self) -> bool:
        """Open through the locator in the userblock (format version 3): one pread, one mmap,
        no HDF5. False when the shard has none, keeps its data compressed, or was changed after
        it was written (then h5py opens it with every structure check)."""
        try:
            with opened(self._path, self._fd) as fd:
                locator = located(fd, self._path)
                view = None if locator is None else map_file(fd, locator.file_size)
        except FileNotFoundError:
            return False            # h5py reports it
        except ValueError as exc:   # changed size since its check
            raise self._corrupt(str(exc)) from None
        if locator is None or view is None:
            return False
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
        self._keys = KeyTable(self._path, self._count, table("key_blocks", "<i8"), table("keys", "u1"))
        self._use_chunks(locator.chunks, max(1, locator.chunk_bytes), locator.row_bytes,
                         np.dtype(self._schema.dtype) if self._schema.is_array else np.dtype(np.uint8))

    def _map(self, fileno: int) -> None:
        self._use_map(map_file(fileno, os.fstat(fileno).st_size))

    def _use_map(self, view: mmap.mmap) -> None:
        self._mmap = view
        if not self.readahead and hasattr(mmap, "MADV_RANDOM"):
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
        if count <= 1:              # a small shard: no numpy for one number
            self._shift, self._run = [int(where[0]) if count else 0], [0]
        else:
            self._shift = (where - np.arange(count, dtype=np.int64) * chunk_bytes).tolist()
            self._run = np.concatenate([[0], np.cumsum(np.diff(where) != chunk_bytes)]).tolist()
        self._rows = self._one_run_rows()

    def _one_run_rows(self) -> Optional[np.ndarray]:
        """Every fixed-shape row as one (count, *shape) view when the chunks lie back to back inside
        the map: a read is then one index into it, touching one array of this shard, not four."""
        if self._offsets is not None or self._run[-1] != 0 or self._flat is None or self._mmap is None:
            return None
        begin, nbytes = self._shift[0], self._count * self._row_bytes
        if begin < 0 or begin + nbytes > len(self._flat) or \
                self._row_bytes != self._dtype.itemsize * math.prod(self._schema.shape):   # np.prod: 15 us
            return None             # read() names the sample that lies outside the file
        return map_rows(self._mmap, self._dtype, self._schema.shape, self._count, begin)

    def _load_tables(self) -> None:
        """Check the attributes and every dataset's metadata, then read the small tables."""
        version = self._file.attrs.get("format_version", FORMAT_VERSION)
        if not isinstance(version, (int, np.integer)) or int(version) > FORMAT_VERSION:
            raise CorruptShardError(f"HDF5 shard format version {version!r} is newer than this "
                                    f"shardkit reads ({FORMAT_VERSION}); upgrade shardkit", path=self._path)
        file_size = os.path.getsize(fd_path(self._fd, self._path))
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
        offsets = self._offsets
        if offsets is None:         # arrays are cut by shape
            return
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
        if dset.size and dset.chunks is not None and self._schema.compression != "none":
            self._inflated = InflatedChunks(dset, self._schema.compression,
                                            os.path.getsize(fd_path(self._fd, self._path)), self._path)
            return
        if (dset.size == 0 or dset.chunks is None or dset.compression or dset.shuffle or dset.fletcher32
                or dset.scaleoffset or tuple(dset.chunks[1:]) != tuple(dset.shape[1:])):
            return
        rows = int(dset.chunks[0])
        row_bytes = int(np.prod(dset.shape[1:], dtype=np.int64)) * dset.dtype.itemsize
        chunk_bytes = rows * row_bytes
        count = -(-int(dset.shape[0]) // rows)
        where = np.full(count, -1, dtype=np.int64)

        for info in chunk_infos(dset.id):
            if info.size == chunk_bytes and info.filter_mask == 0:
                where[info.chunk_offset[0] // rows] = info.byte_offset
        if where.min() < 0 or int(where.max()) + chunk_bytes > os.path.getsize(fd_path(self._fd, self._path)):
            return
        with opened(self._path, self._fd) as fd:
            self._map(fd)
        self._use_chunks(where, chunk_bytes, row_bytes, dset.dtype)

    def _map_keys(self) -> bool:
        """Point the key table at the map (so h5py may close); False when a key dataset is not
        stored contiguously inside the file (then h5py stays open to read it)."""
        if self._keys is None:
            return True
        key_data, key_blocks = (self._mapped(dset) for dset in self._key_datasets)
        if key_data is None or key_blocks is None:
            return False
        self._keys = KeyTable(self._path, self._count, key_blocks, key_data)
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

    def _payload(self, index: int) -> Payload:
        if self._flat is None:
            source = self._data if self._inflated is None else self._inflated      # both index as h5py does
            return source[index] if self._offsets is None else source[self._offsets[index]:self._offsets[index + 1]]
        if self._offsets is None:
            chunk = index * self._row_bytes // self._chunk_bytes
            begin = self._shift[chunk] + index * self._row_bytes
            return self._flat[begin:begin + self._row_bytes].view(self._dtype).reshape(self._schema.shape)
        begin, end = self._offsets[index:index + 2].tolist()
        if begin == end:            # an empty payload (a field's absent value) may lie past the last chunk
            return self._flat[:0]
        first = begin // self._chunk_bytes
        if self._run[first] == self._run[max(begin, end - 1) // self._chunk_bytes]:
            shift = self._shift[first]          # one run of back-to-back chunks: a view
            return self._flat[shift + begin:shift + end]
        return self._pieces(begin, end)

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Mapped bytes payloads as slices of the map, all located at once; else read() on each."""
        if self._flat is None or self._offsets is None:
            return super().read_many(indices)
        wanted = np.asarray(indices, dtype=np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= self._count):
            bad = wanted[(wanted < 0) | (wanted >= self._count)][0]
            raise IndexError(f"sample {bad} out of range for shard of {self._count}")
        begins, ends = self._offsets[wanted], self._offsets[wanted + 1]
        if not len(self._run):      # no chunk: every payload is empty
            return [Encoded(self._flat[:0], label, crc) for label, crc in
                    zip(self._labels[wanted].tolist(), self._crcs[wanted].tolist())]
        # an empty payload may lie past the last chunk: it is read as an empty slice of that one
        first = np.minimum(begins // self._chunk_bytes, len(self._run) - 1)
        last = np.minimum(np.maximum(begins, ends - 1) // self._chunk_bytes, len(self._run) - 1)
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
        size, flat = self._chunk_bytes, self._flat
        assert flat is not None, "chunk pieces are read from the map"
        first, last = begin // size, max(begin, end - 1) // size
        pieces = []
        for chunk in range(first, last + 1):
            low, high = max(begin, chunk * size), min(end, (chunk + 1) * size)
            pieces.append(flat[self._shift[chunk] + low:self._shift[chunk] + high])
        return np.concatenate(pieces)

    def key(self, index: int) -> Optional[str]:
        return super().key(index) if self._keys is None else self._keys.key(index)

    def close(self) -> None:
        self._flat = self._rows = None
        self._keys = None           # its views of the map would keep the map open
        if self._file is None and self._mmap is not None:   # tables are views of the map too
            self._labels, self._crcs = np.zeros(0, np.int64), np.zeros(0, np.uint32)
            self._offsets = None if getattr(self, "_offsets", None) is None else np.zeros(1, np.int64)
        close_map(self._mmap)
        self._mmap = None
        if getattr(self, "_file", None) is not None:
            self._file.close()
            self._file = None


def short_error(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def located(fd: int, path: str, size: Optional[int] = None) -> Optional[Locator]:
    """A version-3 shard's locator, when it maps the data and still describes the file (what a
    reader and peek may trust), checked with preads (one, for a small shard); None otherwise, and
    h5py reads the shard. CorruptShardError when the locator itself is damaged. size: the file's,
    when known."""
    first = os.pread(fd, FIRST_READ, 0)
    raw = read_head(fd, path, first)
    if raw is None:
        return None
    if size is None:
        size = os.fstat(fd).st_size
    locator = parse(raw, path, size)
    view = FileView(fd, size, first)
    if not locator.mapped or not describes(locator, view, size):
        return None
    locator.view = view
    return locator
