"""Reads a .pt shard: through the locator and one mmap when it has one that still describes the
archive (version 3), else through torch.load(mmap=True, weights_only=True) after the zip index check.
torch is imported only on that second path, so reading located shards (and verify --quick) never
pays for importing it."""
from __future__ import annotations

import mmap
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import CorruptShardError
from ..integrity import fd_path
from ..records import Encoded, Payload
from ..schema import SampleSchema
from .base import TableShardReader
from .keys import KeyTable
from .locating import FileView, close_map, map_file, map_rows, opened
from .packing import array_dtype, restore
from .pt_layout import FORMAT_NAME, FORMAT_VERSION
from .pt_locator import FIRST_READ, TENSORS, PTLocator, describes, read_locator
from .pt_zip import check_zip_index

#: The tensors of every version and (version 2 on) the key tensors, with their torch dtype names.
_TENSORS = {"data": "uint8", "offsets": "int64", "raw_lengths": "int64", "labels": "int64", "crc32": "int64"}
_KEY_TENSORS = {"keys": "uint8", "key_blocks": "int64"}


class PTReader(TableShardReader):
    """Random access into the mmap'd tensors; uncompressed payloads are zero-copy read-only views."""

    def __init__(self, path: str, schema: SampleSchema, located: bool = True, fd: Optional[int] = None) -> None:
        self._path = path
        self._schema = schema
        self._map: Optional[mmap.mmap] = None
        located_arrays = self._open_located(fd) if located else None
        if located_arrays is not None:
            fields, arrays = located_arrays
            self._check_fields(fields)
        else:
            import torch        # only shards without a locator (or changed since written) need it
            name = fd_path(fd, path)
            try:
                check_zip_index(name)
                shard = torch.load(name, map_location="cpu", mmap=True, weights_only=True)
            except Exception as exc:  # noqa: BLE001 - torch raises many types for a damaged archive
                text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise CorruptShardError(f"not a readable .pt shard ({text[:200]})", path=path) from None
            self._check_fields(shard)
            fields, arrays = shard, self._tensors(shard)
        self._check_tables(fields["num_samples"], arrays)
        self._data = arrays["data"]
        self._offsets = arrays["offsets"]
        self._raw_lengths = arrays["raw_lengths"]
        self._labels = arrays["labels"]
        self._crcs = arrays["crc32"]
        self._count = len(self._labels)
        self._keys: Optional[KeyTable] = None
        if "keys" in arrays:
            self.dataset_id = fields["dataset_id"]
            self._keys = KeyTable(path, self._count, arrays["key_blocks"], arrays["keys"])
        self._compressed = schema.compression == "gzip"
        #: Uncompressed bytes payloads were fully checked on open: reads slice and return them.
        self._plain = not self._compressed and not schema.is_array
        #: Uncompressed fixed-shape rows (each of the schema's length, back to back from offset 0, as
        #: _check_tables found) as one (count, *shape) view: a read indexes it.
        self._rows = None
        if schema.is_array and not self._compressed:
            if located_arrays is not None and self._map is not None:    # one array on the map itself
                self._rows = map_rows(self._map, array_dtype(schema), schema.shape, self._count, self._data_offset)
            else:
                self._rows = self._data.view(array_dtype(schema)).reshape((self._count, *schema.shape))

    @property
    def inheritable(self) -> bool:
        """Read through its one map (located), nothing of torch's (a torch.load'ed shard holds torch
        storages)."""
        return self._map is not None

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt .pt shard: {problem}", path=self._path)

    def _open_located(self, fd: Optional[int]) -> Optional[Tuple[Dict[str, Any], Dict[str, np.ndarray]]]:
        """(plain fields, tensors as read-only views of one map) through the locator in the archive's
        comment (format version 3): no unpickling. None when the shard has none or was changed
        after it was written (then torch.load opens it)."""
        try:
            with opened(self._path, fd) as descriptor:
                locator = located(descriptor, self._path)
                self._map = None if locator is None else map_file(descriptor, locator.file_size)
        except FileNotFoundError:
            return None             # torch.load reports it
        except ValueError as exc:   # changed size since its check
            raise self._corrupt(str(exc)) from None
        if locator is None or self._map is None:
            return None
        flat = np.frombuffer(self._map, dtype=np.uint8)
        self._data_offset = locator.tables["data"][0]
        arrays = {}
        for name, itemsize in TENSORS:
            offset, nbytes = locator.tables[name]
            arrays[name] = flat[offset:offset + nbytes].view("<u1" if itemsize == 1 else "<i8")
        return locator.fields, arrays

    def _tensors(self, shard: Dict[str, Any]) -> Dict[str, np.ndarray]:
        """The shard's tensors as read-only arrays, once each has the expected dtype and shape."""
        tensors = dict(_TENSORS)
        if shard.get("format_version", 0) >= 2:
            tensors.update(_KEY_TENSORS)
        arrays: Dict[str, np.ndarray] = {}
        import torch
        for name, dtype_name in tensors.items():
            tensor, dtype = shard.get(name), getattr(torch, dtype_name)
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tensor.dim() != 1 \
                    or not tensor.is_contiguous() or tensor.device.type != "cpu":
                raise self._corrupt(f"{name} is not a 1-D {dtype} tensor")
            array_ = tensor.numpy()
            array_.flags.writeable = False
            arrays[name] = array_
        return arrays

    def _check_fields(self, shard: Any) -> None:
        """The plain fields (format, version, count, identity) against the schema."""
        problem = field_problem(shard, self._schema)
        if problem:
            raise self._corrupt(problem)

    def _check_tables(self, count: int, arrays: Dict[str, np.ndarray]) -> None:
        """The tables against each other and the count, before any of them is used to read."""
        schema = self._schema
        offsets, raw, crcs = arrays["offsets"], arrays["raw_lengths"], arrays["crc32"]
        if len(offsets) != count + 1 or len(raw) != count or len(arrays["labels"]) != count or len(crcs) != count:
            raise self._corrupt("tensor lengths do not match num_samples")
        stored = offsets[1:] - offsets[:-1]      # np.diff's checks cost more than the subtraction
        if self._plain_rows(offsets, stored, raw, crcs, len(arrays["data"])):
            return
        problem = None
        if offsets[0] != 0 or offsets[-1] != len(arrays["data"]) or (count and stored.min() < 0):
            problem = "offsets are not increasing within the data"
        elif count and (raw.min() < 0 or crcs.min() < 0 or crcs.max() > 0xFFFFFFFF):
            problem = "negative lengths or CRCs out of range"
        elif schema.is_array and count and (raw.min() != schema.sample_nbytes or raw.max() != schema.sample_nbytes):
            problem = f"array payloads are not {schema.sample_nbytes} bytes"
        elif schema.compression == "none" and not np.array_equal(stored, raw):
            problem = "stored and raw lengths differ in an uncompressed shard"
        if problem:
            raise self._corrupt(problem)

    def _plain_rows(self, offsets: np.ndarray, stored: np.ndarray, raw: np.ndarray, crcs: np.ndarray,
                    data_bytes: int) -> bool:
        """Whether uncompressed fixed-shape rows pass every check of _check_tables, in the fewest
        array passes (each costs microseconds on a small shard, paid by every first open): each
        stored and raw length is the schema's (so none is negative and they agree), the offsets
        start at 0 (so they increase by it to count rows' bytes, which the data holds) and every CRC
        fits 32 bits. False: the full checks name what is wrong."""
        schema = self._schema
        if not schema.is_array or schema.compression != "none" or not len(raw):
            return False
        nbytes = schema.sample_nbytes
        return (offsets[0] == 0 and data_bytes == len(raw) * nbytes and not (stored != nbytes).any()
                and not (raw != nbytes).any() and not (crcs >> 32).any())

    def _payload(self, index: int) -> Payload:
        stored = self._data[self._offsets[index]:self._offsets[index + 1]]
        return stored if self._plain else restore(
            self._schema, memoryview(stored), int(self._raw_lengths[index]), self._compressed, self._path, index)

    def key(self, index: int) -> Optional[str]:
        return super().key(index) if self._keys is None else self._keys.key(index)

    def read_many(self, indices: Sequence[int]) -> List[Encoded]:
        """Uncompressed bytes payloads as slices of the mapped data, all located at once."""
        if not self._plain:
            return super().read_many(indices)
        wanted = np.asarray(indices, dtype=np.int64)
        if len(wanted) and (wanted.min() < 0 or wanted.max() >= self._count):
            bad = wanted[(wanted < 0) | (wanted >= self._count)][0]
            raise IndexError(f"sample {bad} out of range for shard of {self._count}")
        data = self._data
        return [Encoded(data[begin:end], label, crc) for begin, end, label, crc in
                zip(self._offsets[wanted].tolist(), self._offsets[wanted + 1].tolist(),
                    self._labels[wanted].tolist(), self._crcs[wanted].tolist())]

    def close(self) -> None:
        self._keys = self._rows = None
        # Dropping the tensors unmaps the file once no returned view still uses it.
        self._data = self._offsets = self._raw_lengths = self._labels = self._crcs = np.zeros(0)
        self._count = 0
        close_map(self._map)
        self._map = None


def field_problem(shard: Any, schema: SampleSchema) -> Optional[str]:
    """What is wrong with a shard's plain fields (format, version, count, identity) for the
    schema, or None."""
    if not isinstance(shard, dict):
        return f"holds a {type(shard).__name__}, not a dict"
    expected = {"shardkit_format": FORMAT_NAME, "layout": schema.layout, "compression": schema.compression,
                "dtype": schema.dtype if schema.is_array else None,
                "shape": list(schema.shape) if schema.is_array else None}
    for name, value in expected.items():
        if shard.get(name) != value:
            return f"{name} is {shard.get(name)!r}, expected {value!r}"
    version, count = shard.get("format_version"), shard.get("num_samples")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        return f"format version {version!r}; this shardkit reads up to {FORMAT_VERSION}"
    if not isinstance(count, int) or isinstance(count, bool) or count < 0:
        return f"num_samples is {count!r}"
    if version >= 2 and not isinstance(shard.get("dataset_id"), str):
        return "no dataset_id string"
    return None


def located(fd: int, path: str, size: Optional[int] = None) -> Optional[PTLocator]:
    """A version-3 shard's locator, when it still describes the archive (what a reader and peek may
    trust), checked with preads (one, for a small shard); None otherwise, and torch.load reads the
    shard. CorruptShardError when the locator itself is damaged. size: the file's, when known."""
    if size is None:
        size = os.fstat(fd).st_size
    first = os.pread(fd, FIRST_READ, 0) if size <= FIRST_READ else b""
    found = read_locator(fd, path, size, first)
    if found is None:
        return None
    locator, comment = found
    view = FileView(fd, size, first)
    if not describes(locator, view, comment):
        return None
    locator.view = view
    return locator
