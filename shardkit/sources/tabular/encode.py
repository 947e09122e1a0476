"""Field values -> feature vectors, labels and text parts: what the scan computes for each block of
rows before the codec (codecs/tabular.py) lays them out.

Numbers come already parsed (Parsed, from Arrow) or as strings; category and class-label values
come as their distinct strings (Distinct), so a vocabulary lookup and its checks run once per
distinct value, not per row. A bad value makes its row bad, with a reason naming the column.
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...codecs.tabular import EXACT_INT, MISSING_VALUES, Column, LabelSpec, TabularCodec


def is_missing(value: str) -> bool:
    """Whether a field is one of the missing-value spellings (spaces around it ignored)."""
    return value in MISSING_VALUES or value.strip() in MISSING_VALUES


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


class RowEncoder(TabularCodec):
    """The codec of a table while its rows are read: field values -> vectors, labels, text parts,
    and the ids of category values whose vocabulary is still being collected."""

    def __init__(self, columns: Sequence[Column], dtype: str, label: Optional[LabelSpec]) -> None:
        super().__init__(columns, dtype, label)
        self._lookups: List[Any] = [_codebook(column.vocabulary) if column.type == "category" else None
                                    for column in self.features]
        self._class_lookup = _codebook(label.classes or None) if label is not None and label.kind == "class" \
            else None

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


__all__ = ["Distinct", "OpenCodes", "Parsed", "RowEncoder", "is_missing", "parse_floats"]
