"""Writes a .pt shard: payloads packed into one byte buffer, torch.save's archive at close (written by
pt_archive, without torch), then the locator."""
from __future__ import annotations

from array import array
from typing import Any, Optional, Sequence

import numpy as np

from ..records import Encoded, EncodedRows
from ..schema import SampleSchema
from .base import ShardWriter
from .keys import KeyPacker
from .pt_archive import Tensor, write
from .packing import add_columns, add_offsets, compress, compress_run, payload_bytes, raw_rows, run_bytes
from .pt_layout import FORMAT_NAME, FORMAT_VERSION
from .pt_locator import seal


class PTWriter(ShardWriter):
    """Packs payloads into one growing byte buffer; the archive is written at close."""

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
        """A block of uncompressed fixed-shape rows, or a run of byte strings, is packed at once
        (the same bytes as append() on each)."""
        if isinstance(samples, EncodedRows) and isinstance(samples.payloads, list) and self._data is not None:
            raws = run_bytes(self._schema, samples.payloads)
            stored = compress_run(self._schema, raws)[0]
            add_offsets(self._offsets, len(self._data), stored)
            self._raw_lengths.frombytes(np.fromiter(map(len, raws), dtype=np.int64, count=len(raws)).tobytes())
            self._data += b"".join(stored)
            add_columns(self._labels, self._crcs, self._keys, samples)
            return
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
        add_columns(self._labels, self._crcs, self._keys, samples)

    def close(self) -> None:
        if self._data is None:
            return
        schema = self._schema
        shard = {
            "shardkit_format": FORMAT_NAME, "format_version": FORMAT_VERSION, "layout": schema.layout,
            "dtype": schema.dtype if schema.is_array else None,
            "shape": list(schema.shape) if schema.is_array else None,
            "compression": schema.compression, "num_samples": len(self._labels),
            "data": Tensor(self._data, "uint8", (len(self._data),)),
            "offsets": _int64(self._offsets), "raw_lengths": _int64(self._raw_lengths),
            "labels": _int64(self._labels), "crc32": _int64(self._crcs), "dataset_id": self._dataset_id,
        }
        key_data, key_blocks = self._keys.finish()
        shard["keys"] = Tensor(bytearray(key_data), "uint8", (len(key_data),))
        shard["key_blocks"] = Tensor(np.ascontiguousarray(key_blocks, dtype=np.int64), "int64", key_blocks.shape)
        with open(self._path, "wb") as handle:
            if not write(handle, shard):
                _torch_save(handle, shard)
        fields = {name: value for name, value in shard.items() if not isinstance(value, Tensor)}
        seal(self._path, fields, {name: memoryview(value.data).nbytes for name, value in shard.items()
                                  if isinstance(value, Tensor)})
        del shard
        self._data = None

    def abort(self) -> None:
        self._data = None


def _int64(column: array) -> Tensor:
    return Tensor(column, "int64", (len(column),))


def _torch_save(handle: Any, shard: dict) -> None:
    """torch.save(shard): for an archive of 4 GiB or more, which needs zip64 headers. A file object
    (not a path) keeps the archive's inner folder name fixed ("archive")."""
    import torch

    def as_tensor(value: Tensor) -> torch.Tensor:
        dtype = torch.uint8 if value.dtype == "uint8" else torch.int64
        if not memoryview(value.data).nbytes:
            return torch.zeros(value.shape, dtype=dtype)
        return torch.frombuffer(memoryview(value.data).cast("B"), dtype=dtype).reshape(value.shape)
    torch.save({name: as_tensor(value) if isinstance(value, Tensor) else value for name, value in shard.items()},
               handle)
