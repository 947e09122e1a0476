"""Arrow arrays -> the values the tabular codec encodes, at Arrow's speed where the values are clean.

A numeric column is cast by Arrow in one call; when that fails (a missing value, a word, spaces
around a number) the column goes the exact way instead: its distinct values, found by Arrow's
dictionary encoding, are read as Python's float() reads them, which also names the bad ones.
Category and class-label columns always go by their distinct values, so a vocabulary costs one
Python step per distinct value and block, not per row. Values stored with a type (Parquet,
Arrow, JSON numbers) are taken as they are, nulls being missing values.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from ...codecs.tabular import MISSING_VALUES
from .encode import Distinct, Parsed

NUL_REASON = "contains a NUL byte (binary data in a text file)"
UTF8_REASON = "not valid UTF-8 text"


def is_string(array: Any) -> bool:
    """Whether an Arrow array holds strings."""
    import pyarrow as pa
    return pa.types.is_string(array.type) or pa.types.is_large_string(array.type)


def distinct(array: Any) -> Distinct:
    """The distinct values of an array (as text) and the index of each row's value among them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if pa.types.is_dictionary(array.type):
        return _used_values(array)
    encoded = pc.dictionary_encode(as_text(array))
    indices = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    return Distinct(strings(encoded.dictionary), indices)


def _used_values(array: Any) -> Distinct:
    """distinct() of a dictionary array: the values of its dictionary that its rows use (a Parquet
    dictionary is its row group's, and may hold more), nulls as "" (missing)."""
    size = len(array.dictionary)
    indices = array.indices.fill_null(size) if array.null_count else array.indices
    indices = indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    used = np.flatnonzero(np.bincount(indices, minlength=size + 1))
    codes = np.zeros(size + 1, dtype=np.int64)
    codes[used] = np.arange(len(used))
    present = used[used < size]
    uniques = strings(array.dictionary.take(present)) + ([""] if len(present) < len(used) else [])
    return Distinct(uniques, codes[indices])


def numbers(array: Any, decimal: Optional[str] = None) -> Any:
    """float64 values (Parsed) of a numeric or clean numeric-text array; Distinct values otherwise.
    decimal: the decimal mark of numbers written as text, when not "." (--decimal ,)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if is_string(array):
        array = as_text(array)
        if decimal is not None:
            array = pc.replace_substring(array, decimal, ".")
        if not _starts_with_numbers(array):          # a failed cast costs more than a look at a few values
            return distinct(array)
        try:
            cast = pc.cast(array, pa.float64())
            return Parsed(cast.to_numpy(zero_copy_only=False), np.zeros(len(array), dtype=bool))
        except pa.ArrowInvalid:
            pass
        missing = pc.is_in(array, value_set=_missing_spellings())
        try:
            cast = pc.cast(pc.if_else(missing, None, array), pa.float64())
        except pa.ArrowInvalid:
            return distinct(array)
        return Parsed(pc.fill_null(cast, float("nan")).to_numpy(zero_copy_only=False),
                      missing.to_numpy(zero_copy_only=False))
    if pa.types.is_float64(array.type) and not array.null_count:     # as stored (text files' number columns)
        return Parsed(array.to_numpy(), np.zeros(len(array), dtype=bool))
    if pa.types.is_boolean(array.type):
        array = pc.cast(array, pa.int8())
    missing = array.is_null().to_numpy(zero_copy_only=False)
    values = pc.cast(array, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    return Parsed(np.where(missing, np.nan, values), missing)


def _starts_with_numbers(array: Any, count: int = 8) -> bool:
    """Whether the first few present values of a string array read as numbers."""
    try:
        [float(value) for value in strings(array.slice(0, count)) if value.strip() not in MISSING_VALUES]
    except ValueError:
        return False
    return True


def _missing_spellings() -> Any:
    import pyarrow as pa
    return pa.array(sorted(MISSING_VALUES), pa.string())


def category_values(array: Any) -> Any:
    """Distinct values of a category or class-label column (numbers stored with a type as their text)."""
    return distinct(array)


def as_text(array: Any) -> Any:
    """A typed array as strings, nulls as empty strings (missing); booleans as 0 and 1."""
    import pyarrow as pa
    import pyarrow.compute as pc
    if is_string(array):
        return pc.fill_null(array, "") if array.null_count else array
    if pa.types.is_boolean(array.type):
        array = pc.cast(array, pa.int8())
    return pc.fill_null(pc.cast(array, pa.string()), "")


def strings(array: Any) -> List[str]:
    """Every value as a Python string (text columns, type inference); invalid UTF-8 as surrogates."""
    import pyarrow as pa
    text = as_text(array)
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        return [value.decode("utf-8", "surrogateescape") for value in text.cast(pa.binary()).to_pylist()]
    return text.to_pylist()


def dirty_rows(arrays: List[Any], values: List[Any]) -> Dict[int, str]:
    """Rows of text files holding a NUL byte or invalid UTF-8, with why, given each column's array
    and what it became: numbers Arrow could cast hold neither, distinct values are looked at once
    each, text columns (None) row by row."""
    import pyarrow as pa
    import pyarrow.compute as pc
    reasons: Dict[int, str] = {}
    for array, value in zip(arrays, values):
        if isinstance(value, Parsed):
            continue
        if isinstance(value, Distinct):
            bad = _dirty_values(value.uniques)
            for why in (NUL_REASON, UTF8_REASON):
                chosen = np.fromiter((index for index, found in bad.items() if found == why), dtype=np.int64)
                if len(chosen):
                    for index in np.flatnonzero(np.isin(value.indices, chosen)).tolist():
                        reasons.setdefault(index, why)
            continue
        nul = pc.match_substring(array, "\x00")
        if nul.true_count:
            for index in np.flatnonzero(nul.to_numpy(zero_copy_only=False)).tolist():
                reasons.setdefault(index, NUL_REASON)
        try:
            array.validate(full=True)
        except pa.ArrowInvalid:
            for index, text in enumerate(array.cast(pa.binary()).to_pylist()):
                try:
                    text.decode("utf-8")
                except UnicodeDecodeError:
                    reasons.setdefault(index, UTF8_REASON)
    return reasons


def _dirty_values(values: List[str]) -> Dict[int, str]:
    """The index and reason of each value (strings() of a text file's field) holding a NUL or
    invalid UTF-8 (which strings() keeps as lone surrogates)."""
    found: Dict[int, str] = {}
    for index, value in enumerate(values):
        if "\x00" in value:
            found[index] = NUL_REASON
        elif not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                found[index] = UTF8_REASON
    return found


__all__ = ["as_text", "category_values", "dirty_rows", "distinct", "is_string", "numbers", "strings"]
