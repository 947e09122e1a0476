"""Tabular codec: CSV field strings -> one stored payload per row, and payload -> features at read time.

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
from operator import itemgetter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import UsageError
from ..records import Encoded, EncodedRows, Payload
from ..schema import LAYOUT_ARRAY, LAYOUT_BYTES, SampleSchema

TABULAR_VERSION = 1
COLUMN_TYPES = ("float", "int", "category", "text")
#: Field values read as missing (after stripping spaces): NaN in float columns, code -1 in categories.
MISSING_VALUES = frozenset({"", "NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "-nan", "-NaN",
                            "null", "NULL", "Null", "None", "none", "<NA>", "#N/A"})
#: Largest integer magnitude each vector dtype holds exactly.
EXACT_INT = {"float32": 2 ** 24, "float64": 2 ** 53 - 1}
_U32 = struct.Struct("<I")


def is_missing(value: str) -> bool:
    """Whether a field is one of the missing-value spellings (spaces around it ignored)."""
    return value in MISSING_VALUES or value.strip() in MISSING_VALUES


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


@dataclass(frozen=True)
class Parsed:
    """A column's values already read as float64 numbers (NaN where missing), and which are missing."""

    values: np.ndarray
    missing: np.ndarray


@dataclass(frozen=True)
class Distinct:
    """A column given by its distinct field strings and the index of each row's value among them:
    the conversion runs once per distinct value."""

    uniques: List[str]
    indices: np.ndarray


@dataclass
class EncodedBatch:
    """The rows of one parsed chunk: a sample for each good row, a reason for each bad one."""

    samples: Sequence[Optional[Encoded]]     # EncodedRows when every row is good and there is no text
    reasons: Dict[int, str]


def parse_floats(values: Sequence[str], first_bad: bool = False) -> Tuple[np.ndarray, Dict[int, str], np.ndarray]:
    """float64 values (NaN for missing), bad positions with reasons, and the missing mask.
    first_bad: stop at the first bad value (only whether there is one matters)."""
    count = len(values)
    try:
        parsed = np.array(values, dtype=np.float64).reshape(count)
        return parsed, {}, np.zeros(count, dtype=bool)
    except ValueError:
        pass
    missing = np.fromiter((v in MISSING_VALUES for v in values), dtype=bool, count=count)
    cleaned = ["nan" if flag else v for v, flag in zip(values, missing.tolist())]
    try:
        return np.array(cleaned, dtype=np.float64).reshape(count), {}, missing
    except ValueError:
        pass
    parsed = np.empty(count, dtype=np.float64)
    bad: Dict[int, str] = {}
    for index, value in enumerate(cleaned):
        try:
            parsed[index] = float(value)
        except ValueError:
            parsed[index] = np.nan
            if is_missing(value):
                missing[index] = True
            else:
                bad[index] = f"{_show(value)} is not a number"
                if first_bad:
                    break
    return parsed, bad, missing


def _show(value: str, limit: int = 40) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


class TabularCodec:
    """Turns the field strings of a chunk's rows into Encoded samples, column by column."""

    def __init__(self, columns: Sequence[Column], dtype: str, label: Optional[LabelSpec]) -> None:
        if dtype not in EXACT_INT:
            raise UsageError(f"tabular vector dtype must be float32 or float64, not {dtype!r}")
        self.features = [column for column in columns if column.type != "text"]
        self.texts = [column for column in columns if column.type == "text"]
        self.columns = self.features + self.texts
        self.dtype = dtype
        self.label = label
        self._lookups: List[Any] = [_codebook(column.vocabulary) if column.type == "category" else None
                                    for column in self.features]
        self._class_lookup = _codebook(label.classes or None) if label is not None and label.kind == "class" \
            else None
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

    # ---- encoding ---------------------------------------------------------------------
    def vectors(self, columns: Sequence[Any], labels: Optional[Any],
                count: int) -> Tuple[np.ndarray, Optional[np.ndarray], Dict[int, str]]:
        """(feature matrix of `count` rows, int64 labels or None, reason of each bad row) given each
        feature column's values (field strings, or a float64 array already parsed) and the label values."""
        reasons: Dict[int, str] = {}
        matrix = np.empty((count, len(self.features)), dtype=self.dtype)
        for slot, column in enumerate(self.features):
            matrix[:, slot] = _per_row(lambda values, found: self._convert(column, values, self._lookups[slot], found),
                                       columns[slot], reasons)
        label_values = _per_row(self._labels, labels, reasons) \
            if self.label is not None else None
        return matrix, label_values, reasons

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
        samples: List[Optional[Encoded]] = [None] * count
        width = self._row_bytes
        matrix = np.ascontiguousarray(matrix, dtype=self.dtype)
        flat = memoryview(matrix.reshape(-1).view(np.uint8))
        crc32 = zlib.crc32
        if tails is None and not reasons:     # the common case, without a Python step per field
            crcs = [crc32(flat[start:start + width]) for start in range(0, count * width, width)] \
                if width else [crc32(b"")] * count
            labels = [-1] * count if label_values is None else np.asarray(label_values).astype(np.int64).tolist()
            return EncodedBatch(EncodedRows(matrix, labels, crcs), reasons)
        for row, index in enumerate(good):
            label = -1 if label_values is None else int(label_values[index])
            if tails is not None:
                payload: Payload = bytes(flat[row * width:(row + 1) * width]) + tails[index]
                samples[index] = Encoded(payload, label, crc32(payload) & 0xFFFFFFFF)
            else:
                samples[index] = Encoded(matrix[row], label, crc32(flat[row * width:(row + 1) * width]) & 0xFFFFFFFF)
        return EncodedBatch(samples, reasons)

    def open_codes(self) -> Dict[str, "OpenCodes"]:
        """The codes of every category column (and class label) whose vocabulary is being collected."""
        found = {column.name: lookup for column, lookup in zip(self.features, self._lookups)
                 if isinstance(lookup, OpenCodes)}
        if self.label is not None and isinstance(self._class_lookup, OpenCodes):
            found[self.label.name] = self._class_lookup
        return found

    def _convert(self, column: Column, values: Sequence[str], lookup: Any,
                 reasons: Dict[int, str]) -> np.ndarray:
        if column.type == "category":
            assert lookup is not None
            if isinstance(lookup, OpenCodes):
                return lookup.codes(values)
            codes = _codes(lookup, values)
            for index in np.flatnonzero(codes == -2).tolist():
                if is_missing(values[index]):
                    codes[index] = -1
                else:
                    reasons.setdefault(index, f"column {column.name!r}: {_show(values[index])} is not in its "
                                              "vocabulary")
            return codes
        parsed, bad, missing = _floats(values)
        for index, why in bad.items():
            reasons.setdefault(index, f"column {column.name!r}: {why}")
        if column.type == "float":
            return parsed.astype(np.float32)
        limit = EXACT_INT[self.dtype]
        with np.errstate(invalid="ignore"):
            wrong = missing | (parsed != np.trunc(parsed)) | ~(np.abs(parsed) <= limit)
        for index in np.flatnonzero(wrong).tolist():
            if index in bad:
                continue
            value = _text(values, index)
            if missing[index]:
                why = "missing value in an integer column (declare it float in --schema to allow NaN)"
            elif parsed[index] != np.trunc(parsed[index]) or not np.isfinite(parsed[index]):
                why = f"{_show(value)} is not an integer"
            else:
                why = f"integer {value.strip()} does not fit {self.dtype} exactly (declare \"dtype\": " \
                      "\"float64\" in --schema)" if self.dtype == "float32" else \
                      f"integer {value.strip()} is beyond 2**53 and cannot be stored exactly"
            reasons.setdefault(index, f"column {column.name!r}: {why}")
        return parsed

    def _labels(self, values: Any, reasons: Dict[int, str]) -> np.ndarray:
        assert self.label is not None and values is not None
        name = self.label.name
        if self.label.kind == "class":
            assert self._class_lookup is not None
            lookup = self._class_lookup
            codes = lookup.codes(values) if isinstance(lookup, OpenCodes) else _codes(lookup, values)
            for index in np.flatnonzero(codes < 0).tolist():
                value = values[index]
                why = "missing label" if is_missing(value) else f"label {_show(value)} is not one of the classes"
                reasons.setdefault(index, f"column {name!r}: {why}")
            return codes
        parsed, bad, missing = _floats(values)
        with np.errstate(invalid="ignore"):
            wrong = missing | (parsed != np.trunc(parsed)) | ~(np.abs(parsed) <= EXACT_INT["float64"])
        for index in np.flatnonzero(wrong).tolist():
            value = _text(values, index)
            why = "missing label" if missing[index] or is_missing(value) else \
                bad.get(index, f"label {_show(value)} is not an integer")
            reasons.setdefault(index, f"column {name!r}: {why}")
        return np.where(wrong, -1, parsed).astype(np.int64)


def _per_row(convert: Callable[[Any, Dict[int, str]], np.ndarray], values: Any,
             reasons: Dict[int, str]) -> np.ndarray:
    """convert(values, reasons) for every row; for Distinct values, once per distinct value."""
    if not isinstance(values, Distinct):
        return convert(values, reasons)
    found: Dict[int, str] = {}
    converted = convert(values.uniques, found)
    if found:
        indices = values.indices
        for row in np.flatnonzero(np.isin(indices, np.fromiter(found, dtype=np.int64))).tolist():
            reasons.setdefault(row, found[int(indices[row])])
    return converted[values.indices] if len(values.uniques) else np.empty(0, dtype=converted.dtype)


def _floats(values: Any) -> Tuple[np.ndarray, Dict[int, str], np.ndarray]:
    """parse_floats, or values already parsed as numbers as they are."""
    if isinstance(values, Parsed):
        return values.values, {}, values.missing
    return parse_floats(values)


def _text(values: Any, index: int) -> str:
    return repr(float(values.values[index])) if isinstance(values, Parsed) else values[index]


def _codes(lookup: Dict[str, int], values: Sequence[str]) -> np.ndarray:
    """int64 index of each value in lookup, -2 for a value it does not hold."""
    try:
        return _mapped(lookup, values)
    except KeyError:                  # some value is unknown (or missing): the slower, forgiving lookup
        return np.fromiter(map(lookup.get, values, _repeat(-2, len(values))), dtype=np.int64, count=len(values))


def _mapped(lookup: Dict[str, int], values: Sequence[str]) -> np.ndarray:
    """int64 lookup[value] of each value (KeyError for one it lacks); one C call for them all."""
    if len(values) > 1:
        return np.array(itemgetter(*values)(lookup), dtype=np.int64)
    return np.array([lookup[value] for value in values], dtype=np.int64)


def _lookup(names: Sequence[str]) -> Dict[str, int]:
    return {name: index for index, name in enumerate(names)}


def _codebook(names: Optional[Sequence[str]]) -> Any:
    """A fixed lookup for a known vocabulary; OpenCodes for one still being collected (None)."""
    return OpenCodes() if names is None else _lookup(names)


class OpenCodes:
    """Codes of a category column whose vocabulary is still being collected: ids in order of first
    appearance, -1 for missing values. ranks() turns them into codes of the final vocabulary."""

    def __init__(self) -> None:
        self.lookup: Dict[str, int] = {}
        self.names: List[str] = []

    def codes(self, values: Sequence[str]) -> np.ndarray:
        """int64 id of each value, adding the values not seen before."""
        try:
            return _mapped(self.lookup, values)
        except KeyError:
            for value in set(values).difference(self.lookup):
                if is_missing(value):
                    self.lookup[value] = -1
                else:
                    self.lookup[value] = len(self.names)
                    self.names.append(value)
            return _mapped(self.lookup, values)

    def ranks(self, vocabulary: Sequence[str]) -> np.ndarray:
        """int64 code in `vocabulary` (which holds every value seen) of each id; the extra last
        entry keeps -1 (missing) at -1."""
        return np.append(_mapped(_lookup(vocabulary), self.names), -1)


def _repeat(value: int, count: int) -> Any:
    import itertools
    return itertools.repeat(value, count)


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
    if mode == "numpy":
        return lambda payload: np.array(split_record(payload, schema)[0], dtype=np.float32)

    def to_tensor(payload: Payload) -> Any:
        import torch
        return torch.from_numpy(np.array(split_record(payload, schema)[0], dtype=np.float32))
    return to_tensor


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


__all__ = ["COLUMN_TYPES", "Column", "Distinct", "EncodedBatch", "LabelSpec", "MISSING_VALUES", "OpenCodes", "Parsed",
           "TabularCodec",
           "is_missing", "make_tabular_decoder", "parse_floats", "split_record"]
