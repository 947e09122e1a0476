"""Tabular codec: the record layout of a table row (feature vector, label, text parts) -> one stored
payload per row, and payload -> features at read time. Turning field strings into vectors is the
table source's job (sources/tabular/encode.py).

A row's non-text columns (numbers, integer columns, categorical codes) form one fixed-width
vector (float32, or float64 when integer columns need exactness beyond 2**24). Without text
columns that vector is the payload (layout "array"); with text columns the payload is a bytes
record: the vector's little-endian bytes, then per text column a uint32 length and its UTF-8
bytes (formats/record-tabular.md). Shared by every format.
"""
from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import UsageError
from ..records import NO_LABEL, Encoded, EncodedRows, Payload
from ..schema import LAYOUT_ARRAY, LAYOUT_BYTES, SampleSchema
from .row_crc import row_crc32

TABULAR_VERSION = 1
COLUMN_TYPES = ("float", "int", "category", "text")
#: Field values read as missing (after stripping spaces): NaN in float columns, code -1 in categories.
MISSING_VALUES = frozenset({"", "NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "-nan", "-NaN",
                            "null", "NULL", "Null", "None", "none", "<NA>", "#N/A"})
#: Largest integer magnitude each vector dtype holds exactly.
EXACT_INT = {"float32": 2 ** 24, "float64": 2 ** 53 - 1}
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Column:
    """One stored column: name, type (float | int | category | text) and a category's vocabulary."""

    name: str
    type: str
    vocabulary: Optional[Tuple[str, ...]] = None

    def to_dict(self) -> Dict[str, Any]:
        """The manifest entry of this column."""
        data: Dict[str, Any] = {"name": self.name, "type": self.type}
        if self.type == "category":
            data["vocabulary"] = list(self.vocabulary or ())
        return data


@dataclass(frozen=True)
class LabelSpec:
    """The target column: integer labels kept as they are, or class names mapped to sorted indices."""

    name: str
    kind: str                          # "int" | "class"
    classes: Tuple[str, ...] = ()


@dataclass
class EncodedBatch:
    """The rows of one parsed chunk: a sample for each good row, a reason for each bad one."""

    samples: Sequence[Optional[Encoded]]     # EncodedRows when every row is good and there is no text
    reasons: Dict[int, str]


class TabularCodec:
    """A table's stored columns and label: the manifest schema, and rows' vectors, labels and text
    parts -> Encoded samples."""

    def __init__(self, columns: Sequence[Column], dtype: str, label: Optional[LabelSpec]) -> None:
        if dtype not in EXACT_INT:
            raise UsageError(f"tabular vector dtype must be float32 or float64, not {dtype!r}")
        self.features = [column for column in columns if column.type != "text"]
        self.texts = [column for column in columns if column.type == "text"]
        self.columns = self.features + self.texts
        self.dtype = dtype
        self.label = label
        self._row_bytes = len(self.features) * np.dtype(dtype).itemsize

    # ---- schema ---------------------------------------------------------------------
    @property
    def layout(self) -> str:
        """array without text columns, bytes with them."""
        return LAYOUT_BYTES if self.texts else LAYOUT_ARRAY

    def schema(self) -> SampleSchema:
        """The SampleSchema recorded in the manifest."""
        codec = {"tabular_version": TABULAR_VERSION, "dtype": self.dtype, "num_features": len(self.features),
                 "num_text": len(self.texts), "label_column": self.label.name if self.label else None,
                 "label_type": self.label.kind if self.label else None,
                 "missing_values": sorted(MISSING_VALUES)}
        shape = (len(self.features),) if self.layout == LAYOUT_ARRAY else ()
        return SampleSchema(kind="tabular", layout=self.layout, dtype=self.dtype, shape=shape,
                            labeled=self.label is not None, codec=codec,
                            columns=[column.to_dict() for column in self.columns])

    def estimated_row_bytes(self, text_bytes: float = 0.0) -> int:
        """Stored bytes of one row (exact without text columns)."""
        if not self.texts:
            return max(1, self._row_bytes)
        return max(1, int(self._row_bytes + 4 * len(self.texts) + text_bytes))

    def text_tails(self, texts: Sequence[Sequence[str]], count: int) -> List[bytes]:
        """The text part of each row's record: per text column a uint32 length and the UTF-8 bytes."""
        pack = _U32.pack
        tails = []
        for index in range(count):
            parts = []
            for values in texts:
                data = values[index].encode("utf-8")
                parts.append(pack(len(data)))
                parts.append(data)
            tails.append(b"".join(parts))
        return tails

    def samples(self, matrix: np.ndarray, label_values: Optional[np.ndarray], tails: Optional[Sequence[bytes]],
                reasons: Dict[int, str]) -> EncodedBatch:
        """Encoded samples of the rows of `matrix` (its labels, and its text tails with text columns);
        None for the rows that `reasons` names."""
        count = len(matrix)
        good = [index for index in range(count) if index not in reasons] if reasons else range(count)
        if reasons:
            matrix = matrix[np.asarray(good, dtype=np.int64)]
        matrix = np.ascontiguousarray(matrix, dtype=self.dtype)
        if tails is None and not reasons:     # the common case, without a Python step per row
            crcs = row_crc32(matrix.view(np.uint8))
            labels = np.full(count, NO_LABEL, dtype=np.int64) if label_values is None else \
                np.asarray(label_values, dtype=np.int64)
            return EncodedBatch(EncodedRows(matrix, labels, crcs), reasons)
        samples: List[Optional[Encoded]] = [None] * count
        width = self._row_bytes
        flat = memoryview(matrix.reshape(-1).view(np.uint8))
        crc32 = zlib.crc32
        for row, index in enumerate(good):
            label = -1 if label_values is None else int(label_values[index])
            if tails is not None:
                payload: Payload = bytes(flat[row * width:(row + 1) * width]) + tails[index]
                samples[index] = Encoded(payload, label, crc32(payload) & 0xFFFFFFFF)
            else:
                samples[index] = Encoded(matrix[row], label, crc32(flat[row * width:(row + 1) * width]) & 0xFFFFFFFF)
        return EncodedBatch(samples, reasons)


# ---- reading ------------------------------------------------------------------------
def split_record(payload: Payload, schema: SampleSchema) -> Tuple[np.ndarray, List[str]]:
    """(feature vector as stored, text values) of one stored tabular payload."""
    codec = schema.codec
    dtype = np.dtype(codec.get("dtype", schema.dtype)).newbyteorder("<")
    if schema.is_array:
        return np.asarray(payload), []
    buffer = memoryview(payload).cast("B") if not isinstance(payload, (bytes, bytearray)) else payload
    count = int(codec.get("num_features", 0))
    vector = np.frombuffer(buffer, dtype=dtype, count=count)
    position = count * dtype.itemsize
    texts: List[str] = []
    for _ in range(int(codec.get("num_text", 0))):
        (length,) = _U32.unpack_from(buffer, position)
        position += 4
        texts.append(bytes(buffer[position:position + length]).decode("utf-8"))
        position += length
    return vector, texts


def make_tabular_decoder(schema: SampleSchema, mode: Optional[str], as_dict: bool = False) -> Callable[[Payload], Any]:
    """Payload -> float32 feature tensor ("pil"/"tensor"), float32 numpy array ("numpy"),
    the payload as stored (None), or with as_dict a {column: value} dict of every stored column."""
    if schema.kind != "tabular":
        raise UsageError(f"no decoder for samples of kind {schema.kind!r}")
    if as_dict:
        return _dict_decoder(schema)
    if mode is None:
        return lambda payload: payload
    features = _feature_vector(schema)
    if mode == "numpy":
        return features
    import torch
    from_numpy = torch.from_numpy
    return lambda payload: from_numpy(features(payload))


def _feature_vector(schema: SampleSchema) -> Callable[[Payload], np.ndarray]:
    """Payload -> a fresh float32 feature vector. A row of the array layout is its vector already:
    a copy (as stored when that is native float32) skips split_record's per-call work (about 1 µs
    of the 2 µs a decoded row took)."""
    if not schema.is_array:
        return lambda payload: np.array(split_record(payload, schema)[0], dtype=np.float32)
    if np.dtype(schema.dtype).newbyteorder("<") == np.dtype(np.float32):     # the rows' stored dtype
        return lambda payload: payload.copy() if type(payload) is np.ndarray else np.array(payload, np.float32)
    return lambda payload: np.array(payload, dtype=np.float32)


def _dict_decoder(schema: SampleSchema) -> Callable[[Payload], Dict[str, Any]]:
    names = [column["name"] for column in schema.columns]
    kinds = [column["type"] for column in schema.columns]
    features = [(name, kind) for name, kind in zip(names, kinds) if kind != "text"]
    texts = [name for name, kind in zip(names, kinds) if kind == "text"]

    def decode(payload: Payload) -> Dict[str, Any]:
        vector, values = split_record(payload, schema)
        row: Dict[str, Any] = {}
        for (name, kind), value in zip(features, vector.tolist()):
            row[name] = np.float32(value) if kind == "float" else np.int64(value)
        row.update(zip(texts, values))
        return row
    return decode


__all__ = ["COLUMN_TYPES", "Column", "EXACT_INT", "EncodedBatch", "LabelSpec", "MISSING_VALUES", "TabularCodec",
           "make_tabular_decoder", "split_record"]
