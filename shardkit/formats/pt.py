"""PyTorch .pt shards: one torch.save file per shard holding packed tensors and plain metadata.

Layout (formats/pt.md is the byte-level contract), a dict with keys in this order:
  shardkit_format "pt", format_version, layout, dtype, shape, compression, num_samples (plain types)
  data         uint8 (total,)   every stored payload back to back (zlib streams when compressed)
  offsets      int64 (N+1,)     sample i is data[offsets[i]:offsets[i+1]]
  raw_lengths  int64 (N,)       payload length before compression
  labels       int64 (N,)       -1 when unlabeled
  crc32        int64 (N,)       zlib CRC-32 of the uncompressed payload (0 .. 2**32-1)
  dataset_id   str; keys uint8, key_blocks int64: the sample keys (formats/keys.md), version 2 on
Readers use torch.load(path, mmap=True, weights_only=True) (torch >= 2.1): tensors stay in the
file's mapping, so a random read touches only its own pages and memory stays flat with shards.
"""
from __future__ import annotations

import mmap
import os
import zipfile
from array import array
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..errors import CorruptShardError
from ..records import Encoded, EncodedRows
from ..schema import SampleSchema
from .base import FormatOptions, ShardFormat, ShardReader, ShardWriter
from .keys import KeyPacker, KeyTable
from .packing import check_per_sample_compression, compress, payload_bytes, raw_rows, restore
from .locating import close_map, map_if
from .pt_locator import TENSORS, PTLocator, describes, read_locator, seal

_TENSORS = {"data": torch.uint8, "offsets": torch.int64, "raw_lengths": torch.int64,
            "labels": torch.int64, "crc32": torch.int64}
#: Version 2 adds the sample keys (and a dataset_id string before them).
_KEY_TENSORS = {"keys": torch.uint8, "key_blocks": torch.int64}


def _tensor(buffer: Any, dtype: torch.dtype) -> torch.Tensor:
    """A tensor sharing a non-empty buffer's memory (torch.frombuffer refuses empty ones)."""
    if len(buffer) == 0:
        return torch.zeros(0, dtype=dtype)
    return torch.frombuffer(buffer, dtype=dtype)


class PTWriter(ShardWriter):
    """Packs payloads into one growing byte buffer; torch.save writes everything at close."""

    def __init__(self, path: str, schema: SampleSchema, dataset_id: str) -> None:
        self._path = path
        self._schema = schema
        self._dataset_id = dataset_id
        self._keys = KeyPacker()
        self._data: Optional[bytearray] = bytearray()
        self._offsets = array("q", [0])
        self._raw_lengths = array("q")
        self._labels = array("q")
        self._crcs = array("q")

    def append(self, sample: Encoded) -> None:
        if self._data is None:
            raise ValueError(f"{self._path}: append after close")
        raw = payload_bytes(self._schema, sample.payload)
        stored, _ = compress(self._schema, raw)
        self._data += stored
        self._offsets.append(len(self._data))
        self._raw_lengths.append(len(raw))
        self._labels.append(int(sample.label))
        self._crcs.append(int(sample.crc32) & 0xFFFFFFFF)
        self._keys.add(sample.key)

    def append_many(self, samples: Sequence[Encoded]) -> None:
        """A block of uncompressed fixed-shape rows is packed at once (the same bytes as append())."""
        rows = raw_rows(self._schema, samples) if self._schema.compression == "none" else None
        if rows is None or self._data is None:
            super().append_many(samples)
            return
        assert isinstance(samples, EncodedRows)
        count, width = rows.shape
        start = len(self._data)
        self._data += memoryview(rows.reshape(-1))
        self._offsets.frombytes((start + width * np.arange(1, count + 1, dtype=np.int64)).tobytes())
        self._raw_lengths.frombytes(np.full(count, width, dtype=np.int64).tobytes())
        self._labels.frombytes(samples.labels.astype(np.int64).tobytes())
        self._crcs.frombytes(samples.crcs.astype(np.int64).tobytes())
        self._keys.extend(samples.keys, len(samples))

    def close(self) -> None:
        if self._data is None:
            return
        schema = self._schema
        shard = {
            "shardkit_format": FORMAT.name, "format_version": FORMAT.version, "layout": schema.layout,
            "dtype": schema.dtype if schema.is_array else None,
            "shape": list(schema.shape) if schema.is_array else None,
            "compression": schema.compression, "num_samples": len(self._labels),
            "data": _tensor(self._data, torch.uint8), "offsets": _tensor(self._offsets, torch.int64),
            "raw_lengths": _tensor(self._raw_lengths, torch.int64), "labels": _tensor(self._labels, torch.int64),
            "crc32": _tensor(self._crcs, torch.int64), "dataset_id": self._dataset_id,
        }
        key_data, key_blocks = self._keys.finish()
        shard["keys"] = _tensor(bytearray(key_data), torch.uint8)
        shard["key_blocks"] = torch.from_numpy(key_blocks)
        # A file object (not a path) keeps the archive's inner folder name fixed ("archive"),
        # so the bytes do not depend on the (temporary) file name.
        with open(self._path, "wb") as handle:
            torch.save(shard, handle)
        fields = {name: value for name, value in shard.items() if not isinstance(value, torch.Tensor)}
        seal(self._path, fields, {name: value.numel() * value.element_size() for name, value in shard.items()
                                  if isinstance(value, torch.Tensor)})
        del shard
        self._data = None

    def abort(self) -> None:
        self._data = None


def check_zip_index(path: str) -> None:
    """Raise ValueError unless every entry of the .pt archive is stored uncompressed (as
    torch.save writes them) and no larger than the file, read from the zip's central directory
    before torch.load inflates anything: a deflated entry could be a zip bomb."""
    size = os.path.getsize(path)
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
                raise ValueError(f"archive entry {info.filename!r} is compressed; torch.save stores entries "
                                 "as they are")
            if info.file_size > size:
                raise ValueError(f"archive entry {info.filename!r} claims {info.file_size} bytes in a "
                                 f"{size}-byte file")


class PTReader(ShardReader):
    """Random access into the mmap'd tensors; uncompressed payloads are zero-copy read-only views."""

    def __init__(self, path: str, schema: SampleSchema, options: Dict[str, Any], located: bool = True) -> None:
        self._path = path
        self._schema = schema
        self._map: Optional[mmap.mmap] = None
        located_arrays = self._open_located() if located else None
        if located_arrays is not None:
            fields, arrays = located_arrays
            self._check_fields(fields)
        else:
            try:
                check_zip_index(path)
                shard = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
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
            key_data = arrays["keys"]
            self._keys = KeyTable(path, self._count, lambda: arrays["key_blocks"],
                                  lambda begin, end: key_data[begin:end].tobytes())
        self._compressed = schema.compression == "gzip"
        #: Uncompressed bytes payloads were fully checked on open: reads slice and return them.
        self._plain = not self._compressed and not schema.is_array

    def _corrupt(self, problem: str) -> CorruptShardError:
        return CorruptShardError(f"corrupt .pt shard: {problem}", path=self._path)

    def _open_located(self) -> Optional[Tuple[Dict[str, Any], Dict[str, np.ndarray]]]:
        """(plain fields, tensors as read-only views of one map) through the locator in the archive's
        comment (format version 3): no unpickling. None when the shard has none or was changed
        after it was written (then torch.load opens it)."""
        try:
            handle = open(self._path, "rb")
        except OSError:
            return None             # torch.load reports it
        with handle:
            found = _located(handle.fileno(), self._path)
        if found is None:
            return None
        locator, self._map = found
        flat = np.frombuffer(self._map, dtype=np.uint8)
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
        for name, dtype in tensors.items():
            tensor = shard.get(name)
            if not isinstance(tensor, torch.Tensor) or tensor.dtype != dtype or tensor.dim() != 1 \
                    or not tensor.is_contiguous() or tensor.device.type != "cpu":
                raise self._corrupt(f"{name} is not a 1-D {dtype} tensor")
            array_ = tensor.numpy()
            array_.flags.writeable = False
            arrays[name] = array_
        return arrays

    def _check_fields(self, shard: Any) -> None:
        """The plain fields (format, version, count, identity) against the schema."""
        schema = self._schema
        if not isinstance(shard, dict):
            raise self._corrupt(f"holds a {type(shard).__name__}, not a dict")
        expected = {"shardkit_format": FORMAT.name, "layout": schema.layout, "compression": schema.compression,
                    "dtype": schema.dtype if schema.is_array else None,
                    "shape": list(schema.shape) if schema.is_array else None}
        for name, value in expected.items():
            if shard.get(name) != value:
                raise self._corrupt(f"{name} is {shard.get(name)!r}, expected {value!r}")
        version, count = shard.get("format_version"), shard.get("num_samples")
        if not isinstance(version, int) or not 1 <= version <= FORMAT.version:
            raise self._corrupt(f"format version {version!r}; this shardkit reads up to {FORMAT.version}")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise self._corrupt(f"num_samples is {count!r}")
        if version >= 2 and not isinstance(shard.get("dataset_id"), str):
            raise self._corrupt("no dataset_id string")

    def _check_tables(self, count: int, arrays: Dict[str, np.ndarray]) -> None:
        """The tables against each other and the count, before any of them is used to read."""
        schema = self._schema
        offsets, raw = arrays["offsets"], arrays["raw_lengths"]
        problem = None
        if len(offsets) != count + 1 or len(raw) != count or len(arrays["labels"]) != count \
                or len(arrays["crc32"]) != count:
            problem = "tensor lengths do not match num_samples"
        elif offsets[0] != 0 or offsets[-1] != len(arrays["data"]) or np.any(np.diff(offsets) < 0):
            problem = "offsets are not increasing within the data"
        elif count and (raw.min() < 0 or arrays["crc32"].min() < 0 or arrays["crc32"].max() > 0xFFFFFFFF):
            problem = "negative lengths or CRCs out of range"
        elif schema.is_array and np.any(raw != schema.sample_nbytes):
            problem = f"array payloads are not {schema.sample_nbytes} bytes"
        elif schema.compression == "none" and np.any(np.diff(offsets) != raw):
            problem = "stored and raw lengths differ in an uncompressed shard"
        if problem:
            raise self._corrupt(problem)

    def __len__(self) -> int:
        return self._count

    def read(self, index: int) -> Encoded:
        if not 0 <= index < self._count:
            raise IndexError(f"sample {index} out of range for shard of {self._count}")
        stored = self._data[self._offsets[index]:self._offsets[index + 1]]
        if self._plain:
            payload = stored
        else:
            payload = restore(self._schema, stored, int(self._raw_lengths[index]), self._compressed,
                              self._path, index)
        return Encoded(payload, int(self._labels[index]), int(self._crcs[index]))

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

    def labels(self) -> np.ndarray:
        return self._labels

    def close(self) -> None:
        self._keys = None
        # Dropping the tensors unmaps the file once no returned view still uses it.
        self._data = self._offsets = self._raw_lengths = self._labels = self._crcs = np.zeros(0)
        self._count = 0
        close_map(self._map)
        self._map = None


class PTFormat(ShardFormat):
    """One .pt file per shard, readable with torch alone."""

    name = "pt"
    version = 3
    keys_since = 2
    extension = ".pt"
    # no reader_options: torch.load(mmap=True) has no readahead switch
    fixed_bytes = 8 << 10       # zip entries, their 64-byte alignment, the pickled dict (measured ~3.3 KiB)

    def check(self, schema: SampleSchema) -> None:
        check_per_sample_compression(self.name, schema)

    def sample_bytes(self, schema: SampleSchema, payload_bytes: np.ndarray) -> np.ndarray:
        """Payload + offset, raw length, label and CRC32 (8 each)."""
        return np.asarray(payload_bytes, dtype=np.int64) + 32

    def open_writer(self, path: str, schema: SampleSchema, options: FormatOptions,
                    dataset_id: str = "") -> ShardWriter:
        return PTWriter(path, schema, dataset_id)

    def open_reader(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> ShardReader:
        return PTReader(path, schema, options)

    def peek(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> Tuple[int, Optional[str]]:
        """From the locator (one pread of the file's tail, checked) when the shard has one that
        still describes the archive (as a reader checks it); else by opening it with torch.load."""
        with open(path, "rb") as handle:
            found = _located(handle.fileno(), path)
        if found is None:
            return super().peek(path, schema, options)
        locator, view = found
        view.close()
        return locator.count, locator.dataset_id

    def cross_check(self, path: str, schema: SampleSchema, options: Dict[str, Any]) -> Optional[str]:
        """Open the shard through torch.load with every check, and compare each tensor and field
        with what the locator maps (when it has one that describes the file)."""
        slow = PTReader(path, schema, options, located=False)
        fast = PTReader(path, schema, options)
        try:
            if fast._map is None:
                return None
            for name in ("_data", "_offsets", "_raw_lengths", "_labels", "_crcs"):
                if not np.array_equal(getattr(fast, name), getattr(slow, name)):
                    return f"locator disagrees with the archive: {name.lstrip('_')} differs from torch.load's"
            if (len(fast), fast.dataset_id) != (len(slow), slow.dataset_id) or \
                    [fast.key(i) for i in range(len(fast))] != [slow.key(i) for i in range(len(slow))]:
                return "locator disagrees with the archive: count, dataset_id or keys differ from torch.load's"
            return None
        finally:
            fast.close()
            slow.close()


def _located(fd: int, path: str) -> Optional[Tuple[PTLocator, mmap.mmap]]:
    """A version-3 shard's locator and a read-only map of the file, when the locator still
    describes the archive (what a reader and peek may trust); None otherwise, and torch.load
    reads the shard. CorruptShardError when the locator itself is damaged."""
    found = read_locator(fd, path, os.fstat(fd).st_size)
    if found is None:
        return None
    locator, comment = found
    view = map_if(fd, lambda flat: describes(locator, flat, comment))
    return None if view is None else (locator, view)


FORMAT = PTFormat()
