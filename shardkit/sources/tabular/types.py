"""Column types: inference from a bounded sample of rows, --schema overrides, vocabularies.

Inference looks at the first SAMPLE_ROWS rows: a column whose values are all integers (none
missing) is "int", all numbers or missing is "float", anything else is "category" — unless
--text-columns names it. Values stored with a type (Parquet, Arrow, JSON) keep it: floating
point numbers are "float", integers and booleans "int" ("float" when some are missing), strings
are inferred as text fields are; other types (lists, structs, dates) are refused.
Streaming confirms it: a later value that contradicts the type makes
its row bad. Vocabularies (and string label classes) are collected over every row (encode.OpenCodes).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from ...codecs.tabular import COLUMN_TYPES, EXACT_INT, MISSING_VALUES, Column
from .encode import Distinct, Parsed, is_missing, parse_floats
from ...errors import SourceError, UsageError
from .values import is_string, numbers, strings

SAMPLE_ROWS = 10_000
#: A string column (or label) with more distinct values than this is refused as a category.
MAX_CATEGORIES = 65_536
_INT = re.compile(r"^\s*[+-]?\d+\s*$")


@dataclass
class SchemaOverrides:
    """What --schema FILE fixes: column types (and vocabularies), the vector dtype, the classes."""

    columns: Dict[str, Column] = field(default_factory=dict)
    dtype: Optional[str] = None
    classes: Optional[List[str]] = None


def load_schema_file(path: Optional[str]) -> SchemaOverrides:
    """Read --schema: {"columns": [{"name", "type", "vocabulary"?}], "dtype"?, "classes"?}, or a
    shardkit manifest.json (its schema columns, dtype and classes are reused)."""
    if not path:
        return SchemaOverrides()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read --schema file ({exc.strerror or exc})", path=path) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"--schema file is not valid JSON ({exc})", path=path) from None
    if isinstance(data, dict) and "manifest_version" in data:
        schema = data.get("schema", {})
        data = {"columns": schema.get("columns", []), "dtype": schema.get("dtype"),
                "classes": data.get("classes") or None}
    if isinstance(data, list):
        data = {"columns": data}
    if not isinstance(data, dict) or not isinstance(data.get("columns", []), list):
        raise UsageError("--schema must be a JSON object with a \"columns\" list", path=path)
    overrides = SchemaOverrides()
    for number, entry in enumerate(data.get("columns", [])):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise UsageError(f"columns[{number}] needs a \"name\"", path=path)
        kind = entry.get("type")
        if kind not in COLUMN_TYPES:
            raise UsageError(f"column {entry['name']!r} has type {kind!r}; choose one of "
                             f"{', '.join(COLUMN_TYPES)}", path=path)
        vocabulary = entry.get("vocabulary")
        if vocabulary is not None:
            if kind != "category" or not isinstance(vocabulary, list) or \
                    not all(isinstance(value, str) for value in vocabulary):
                raise UsageError(f"column {entry['name']!r}: \"vocabulary\" must be a list of strings "
                                 "of a category column", path=path)
            if len(set(vocabulary)) != len(vocabulary):
                raise UsageError(f"column {entry['name']!r}: the vocabulary repeats a value", path=path)
            vocabulary = tuple(vocabulary)
        overrides.columns[entry["name"]] = Column(entry["name"], kind, vocabulary)
    dtype = data.get("dtype")
    if dtype is not None and dtype not in EXACT_INT:
        raise UsageError(f"\"dtype\" must be float32 or float64, not {dtype!r}", path=path)
    overrides.dtype = dtype
    classes = data.get("classes")
    if classes is not None:
        if not isinstance(classes, list) or not all(isinstance(name, str) for name in classes) or \
                len(set(classes)) != len(classes):
            raise UsageError("\"classes\" must be a list of distinct strings", path=path)
        overrides.classes = list(classes)
    return overrides


def infer_type(sampled: Any, stored: Any = None, decimal: Optional[str] = None) -> str:
    """float | int | category for a column's sampled values (an Arrow array) and its stored type, if any."""
    if stored is not None and _is_floating(stored):
        return "float"
    values = numbers(sampled, decimal)
    if not isinstance(values, Parsed):
        return _infer_from_text(values.uniques)         # the same answer as for every value
    parsed, missing = values.values, values.missing
    if missing.any() or not len(parsed):
        return "float"
    with np.errstate(invalid="ignore"):
        integral = bool(np.all(parsed == np.trunc(parsed))) and float(np.abs(parsed).max()) <= EXACT_INT["float64"]
    if not integral:
        return "float"
    if is_string(sampled):
        import pyarrow.compute as pc
        return "int" if pc.all(pc.match_substring_regex(sampled, _INT.pattern)).as_py() else "float"
    return "int"


def mostly_numbers(name: str, sampled: Any, decimal: Optional[str], where: str) -> Optional[str]:
    """A warning when a category column holds numbers in most (>= 90%) of its sampled non-missing
    values — a few stray values (a typo, a unit) made it a category — or would, read with a
    decimal comma."""
    for mark in [decimal] if decimal is not None else [None, ","]:
        values = numbers(sampled, mark)
        if isinstance(values, Parsed):
            if mark is not None and not values.missing.all():
                return f"{where}: column {name!r} became a category, but its values are numbers with a decimal " \
                       "comma: pass --decimal , (with another --delimiter than ',')"
            continue
        if _mostly_words(values):
            continue
        _, bad, missing = parse_floats(values.uniques)
        present = int((~missing[values.indices]).sum()) if len(values.uniques) else 0
        stray = int(np.isin(values.indices, np.fromiter(bad, dtype=np.int64)).sum())
        if present and stray <= present // 10:
            examples = ", ".join(repr(values.uniques[index]) for index in sorted(bad)[:3])
            hint = "pass --decimal , and " if mark is not None and decimal is None else ""
            return (f"{where}: column {name!r} became a category because {stray} of {present} sampled values are "
                    f"not numbers (e.g. {examples}); {hint}declare it float in --schema to skip those rows instead")
    return None


def _mostly_words(values: Distinct) -> bool:
    """Whether more than a tenth of the values are sure not to be numbers (not missing, and not
    starting as float() needs: a digit, sign, point, inf or nan): a check per distinct value that
    spares mostly_numbers the float() of each when a column holds words."""
    if not len(values.uniques):
        return False
    first = [value.strip()[:1] for value in values.uniques]
    words = np.fromiter((bool(char) and not (char in "+-.iInN" or char.isdecimal()) and not is_missing(value)
                         for char, value in zip(first, values.uniques)), dtype=bool, count=len(first))
    if not words.any():
        return False
    counts = np.bincount(values.indices, minlength=len(words))
    spelled_missing = np.fromiter((value in MISSING_VALUES for value in values.uniques), dtype=bool, count=len(first))
    return int(counts[words].sum()) > int(counts[~spelled_missing].sum()) // 10


def _infer_from_text(values: Sequence[str]) -> str:
    """infer_type for field strings, as Python's float() reads them."""
    parsed, bad, missing = parse_floats(values, first_bad=True)
    if bad:
        return "category"
    if missing.all():
        return "float"
    with np.errstate(invalid="ignore"):
        integral = not missing.any() and bool(np.all(parsed == np.trunc(parsed))) and \
            float(np.abs(parsed).max()) <= EXACT_INT["float64"]
    if integral and all(_INT.match(value) for value in values):
        return "int"
    return "float"


def _is_floating(stored: Any) -> bool:
    import pyarrow as pa
    return bool(pa.types.is_floating(stored) or pa.types.is_decimal(stored))


def check_scalar(name: str, stored: Any, where: str) -> None:
    """Refuse a column whose stored values are not numbers, booleans or strings."""
    import pyarrow as pa
    if stored is None or pa.types.is_integer(stored) or pa.types.is_floating(stored) or \
            pa.types.is_boolean(stored) or pa.types.is_string(stored) or pa.types.is_large_string(stored) or \
            pa.types.is_null(stored) or pa.types.is_decimal(stored):
        return
    raise UsageError(f"column {name!r} holds {stored} values; only numbers, booleans and strings can "
                     "be stored — leave it out with --columns", path=where)


def needs_float64(sampled: Any) -> bool:
    """Whether an int column's sampled values go beyond what float32 holds exactly."""
    values = numbers(sampled)
    parsed = values.values if isinstance(values, Parsed) else parse_floats(strings(sampled))[0]
    return bool(len(parsed)) and float(abs(parsed).max()) > EXACT_INT["float32"]


def infer_label_kind(name: str, values: Sequence[str], where: str) -> str:
    """"int" when every sampled label is an integer (1 and 1.0 alike), "class" for names.
    Non-integer numbers are refused: labels are integers or class names."""
    present = [value for value in dict.fromkeys(values) if not is_missing(value)]   # distinct, first seen first
    if not present:
        return "int"
    parsed, bad, _ = parse_floats(present, first_bad=True)
    if bad:
        return "class"
    fractional = [value for value, number in zip(present, parsed.tolist()) if number != int(number)] \
        if all(abs(number) < float("inf") for number in parsed.tolist()) else present[:1]
    if fractional:
        raise UsageError(f"label column {name!r} holds non-integer numbers (e.g. {fractional[0]!r}); "
                         "labels must be integers or class names — keep a regression target as a feature "
                         "column instead", path=where)
    return "int"


def too_many_categories(name: str, where: str) -> SourceError:
    """The error for a string column (or label) with more than MAX_CATEGORIES distinct values."""
    return SourceError(f"column {name!r} has more than {MAX_CATEGORIES} distinct values; keep it as text "
                       f"(--text-columns {name}), leave it out (--columns), or give its type in --schema", path=where)


def describe_columns(columns: Sequence[Column]) -> Dict[str, Any]:
    """Counts of columns per type, for the source summary."""
    counts: Dict[str, int] = {}
    for column in columns:
        counts[column.type] = counts.get(column.type, 0) + 1
    return counts


__all__ = ["MAX_CATEGORIES", "SAMPLE_ROWS", "SchemaOverrides", "check_scalar", "describe_columns", "mostly_numbers",
           "infer_label_kind", "infer_type", "load_schema_file", "needs_float64", "too_many_categories"]
