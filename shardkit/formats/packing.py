"""Per-sample payload packing shared by the formats that store one record per sample (LMDB, PT).

Payloads become plain bytes (fixed-shape arrays: their C-order little-endian bytes), are
compressed one by one with zlib when the schema asks for "gzip", and come back with every
length checked before anything sized by it is allocated.
"""
from __future__ import annotations

import zlib
from array import array
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..errors import CorruptSampleError, UsageError
from ..records import Encoded, EncodedRows, Payload
from ..schema import SampleSchema

#: zlib level used for compression "gzip" without --compression-level (the HDF5 default too).
DEFAULT_GZIP_LEVEL = 4
#: deflate cannot expand data by more than this factor; a larger claimed length is corrupt.
MAX_INFLATE_RATIO = 1032

BytesLike = Union[bytes, memoryview]


def check_per_sample_compression(format_name: str, schema: SampleSchema) -> None:
    """Refuse compressions a per-sample zlib format cannot store (lzf is an HDF5 filter)."""
    if schema.compression not in ("none", "gzip"):
        raise UsageError(f"{format_name} compresses samples one by one with zlib and supports "
                         f"--compression none or gzip, not {schema.compression!r} (lzf is HDF5-only)")


def array_dtype(schema: SampleSchema) -> np.dtype:
    """The stored element type of array payloads: the schema's dtype, little-endian."""
    dtype = np.dtype(schema.dtype)
    return dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype


def payload_bytes(schema: SampleSchema, payload: Payload) -> BytesLike:
    """The bytes a payload is stored as; arrays must match the schema's dtype and shape."""
    if schema.is_array:
        array = np.asarray(payload)
        if array.shape != tuple(schema.shape):
            raise ValueError(f"array of shape {array.shape}, schema says {tuple(schema.shape)}")
        array = np.ascontiguousarray(array, dtype=array_dtype(schema))
        return memoryview(array.reshape(-1).view(np.uint8))
    if isinstance(payload, np.ndarray):
        return memoryview(np.ascontiguousarray(payload).reshape(-1).view(np.uint8))
    return payload if isinstance(payload, (bytes, memoryview)) else bytes(payload)


def raw_rows(schema: SampleSchema, samples: Sequence[Encoded]) -> Optional[np.ndarray]:
    """The stored bytes of a block of fixed-shape samples (EncodedRows) as one (n, width) uint8
    array — row i equals payload_bytes() of sample i — or None when they are not such a block."""
    if not schema.is_array or not isinstance(samples, EncodedRows) or not len(samples) \
            or not isinstance(samples.payloads, np.ndarray):
        return None
    block = samples.payloads
    if block.shape[1:] != tuple(schema.shape):
        return None                     # append() on each names the sample that does not fit
    block = np.ascontiguousarray(block, dtype=array_dtype(schema))
    return block.reshape(len(block), -1).view(np.uint8)


def compress(schema: SampleSchema, raw: BytesLike) -> Tuple[BytesLike, bool]:
    """(stored bytes, whether they are a zlib stream) for one payload."""
    if schema.compression != "gzip":
        return raw, False
    level = DEFAULT_GZIP_LEVEL if schema.compression_level is None else int(schema.compression_level)
    return zlib.compress(raw, level), True


def compress_run(schema: SampleSchema, raws: List[BytesLike]) -> Tuple[List[BytesLike], bool]:
    """compress() of each payload of a run: (their stored bytes, whether they are zlib streams)."""
    if schema.compression != "gzip":
        return raws, False
    return [compress(schema, raw)[0] for raw in raws], True


def check_lengths(schema: SampleSchema, stored_length: int, raw_length: int, compressed: bool,
                  path: str, index: int) -> None:
    """Raise CorruptSampleError unless a record's lengths can be true (before reading the payload)."""
    problem = None
    if raw_length < 0 or stored_length < 0:
        problem = "negative length"
    elif schema.is_array and raw_length != schema.sample_nbytes:
        problem = f"{raw_length} payload bytes, the schema's arrays have {schema.sample_nbytes}"
    elif not compressed and raw_length != stored_length:
        problem = f"uncompressed record of {stored_length} bytes claims {raw_length}"
    elif compressed and raw_length > MAX_INFLATE_RATIO * stored_length + 64:
        problem = f"{stored_length} compressed bytes cannot hold {raw_length}"
    if problem:
        raise CorruptSampleError(path, index, f"corrupt record ({problem})")


def restore(schema: SampleSchema, stored: BytesLike, raw_length: int, compressed: bool,
            path: str, index: int) -> Payload:
    """The payload as written: inflated if compressed (never beyond raw_length), arrays reshaped."""
    check_lengths(schema, len(stored), raw_length, compressed, path, index)
    if compressed:
        inflater = zlib.decompressobj()
        try:
            raw: BytesLike = inflater.decompress(stored, raw_length)
        except zlib.error as exc:
            raise CorruptSampleError(path, index, f"compressed payload does not inflate ({exc})") from None
        if len(raw) != raw_length or not inflater.eof or inflater.unconsumed_tail or inflater.unused_data:
            raise CorruptSampleError(path, index, f"compressed payload does not inflate to its recorded "
                                     f"{raw_length} bytes")
    else:
        raw = stored
    if schema.is_array:
        return np.frombuffer(raw, dtype=array_dtype(schema)).reshape(schema.shape)
    return raw


def add_columns(labels: "array[int]", crcs: "array[int]", keys: Any, samples: EncodedRows) -> None:
    """Append a run of samples' labels, CRC32s (in the type of the writer's crcs array) and keys
    (keys: the writer's KeyPacker) to a writer's columns at once."""
    labels.frombytes(samples.labels.astype(np.int64).tobytes())
    crcs.frombytes(samples.crcs.astype(np.dtype(crcs.typecode)).tobytes())
    keys.extend(samples.keys, len(samples))


def run_bytes(schema: SampleSchema, payloads: Sequence[Payload]) -> List[BytesLike]:
    """Each payload of a run as the bytes it is stored as (payload_bytes; bytes as they are)."""
    return [payload if type(payload) is bytes else payload_bytes(schema, payload) for payload in payloads]


def add_offsets(offsets: "array[int]", start: int, raws: Sequence[BytesLike]) -> np.ndarray:
    """Append to a writer's offsets (int64) the ends of byte strings stored back to back from
    `start`; their lengths."""
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=len(raws))
    offsets.frombytes((start + np.cumsum(lengths)).tobytes())
    return lengths
