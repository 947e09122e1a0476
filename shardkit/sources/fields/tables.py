"""A table whose rows are samples of named fields: one column holds each row's image, as a path
relative to the table's folder or as the encoded bytes (a Parquet file as Hugging Face datasets
exports it: a struct of bytes and path, or plain binary); every other column is a field.

The image column becomes the field `image`. The other columns keep their names (characters other
than letters, digits, "_" and "-" become "_") and their types come from Arrow's: integers and
booleans -> int, floats -> float, binary -> bytes, text -> json when every value is a JSON array
or object (boxes, say), else text; lists and structs -> json. `--label-column C` makes C a label
field (its distinct values, sorted, are the classes). A column with missing values is optional.

An image path is read only if it is relative, holds no "..", and leads to a regular file inside the
table's folder (a link is followed only there: sources/tree.py); a row whose image cannot be read
is skipped and listed.
"""
from __future__ import annotations

import json
import os
import re
from typing import Any, Dict, List, Optional, Tuple, Union

from ...errors import SampleError, SourceError, UsageError
from ...schema import FieldSpec
from ..base import Skipped
from ..tree import read_inside
from . import FieldItem, FieldSource, ImageFieldOptions, class_names, image_spec

IMAGE_FIELD = "image"
_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_-]")


def read_table(path: str) -> Any:
    """The whole table at path as an Arrow table, read by its kind (CSV, TSV, JSON Lines, Parquet)."""
    import pyarrow.csv as pcsv
    import pyarrow.json as pjson
    import pyarrow.parquet as pq
    name = path.lower().removesuffix(".gz").removesuffix(".bz2")
    try:
        if name.endswith(".parquet") or name.endswith(".pq"):
            return pq.read_table(path)
        if name.endswith((".jsonl", ".ndjson", ".json")):
            return pjson.read_json(path)
        if name.endswith((".csv", ".tsv", ".tab")):
            delimiter = "," if name.endswith(".csv") else "\t"
            return pcsv.read_csv(path, parse_options=pcsv.ParseOptions(delimiter=delimiter, newlines_in_values=True))
    except (OSError, ValueError) as exc:       # pyarrow's ArrowInvalid is a ValueError
        raise SourceError(f"cannot be read as a table ({str(exc).splitlines()[0][:200]})", path=path) from None
    raise UsageError("is not a table file; --image-column takes a .csv, .tsv, .jsonl or .parquet file", path=path)


def field_name(column: str) -> str:
    """A column's name as a field name."""
    name = _NOT_IN_NAME.sub("_", column)[:64]
    return name if name[:1].isalnum() else ("c" + name)[:64]


class TableImages(FieldSource):
    """The rows of a table with an image column (see the module doc)."""

    kind = "table with images"
    default_order = "source"

    def __init__(self, path: str, image_column: str, label_column: Optional[str] = None,
                 image: Optional[ImageFieldOptions] = None) -> None:
        self.path = path
        self.table = read_table(path)
        names = list(self.table.column_names)
        for given, flag in ((image_column, "--image-column"), (label_column, "--label-column")):
            if given is not None and given not in names:
                raise UsageError(f"{flag} {given!r} is not a column of the table ({', '.join(names)})", path=path)
        self.image_column, self.label_column = image_column, label_column
        folder = os.path.dirname(os.path.abspath(path))
        self.real_root = os.path.realpath(folder)
        self.columns: List[Tuple[str, str]] = [(image_column, IMAGE_FIELD)]    # (column, field)
        self.columns += [(column, field_name(column)) for column in names if column != image_column]
        fields = [field for _, field in self.columns]
        if len(set(fields)) != len(fields):
            raise UsageError(f"two columns would make the same field ({', '.join(fields)}); rename one "
                             f"(the image column is the field {IMAGE_FIELD!r})", path=path)
        super().__init__(folder, tuple(self._spec(column, field, image or {}) for column, field in self.columns), [])
        self._kinds = {spec.name: spec.type for spec in self.fields}

    def _spec(self, column: str, field: str, image: ImageFieldOptions) -> FieldSpec:
        import pyarrow.types as types
        data = self.table.column(column)
        optional = data.null_count > 0
        kind = data.type
        if column == self.image_column:
            return image_spec(field, image, optional)
        if column == self.label_column:
            values = [str(value) for value in data.to_pylist() if value is not None]
            if not values:
                raise SourceError(f"label column {column!r} holds no value", path=self.path)
            return FieldSpec(field, "label", optional=optional, classes=class_names(values))
        if types.is_integer(kind) or types.is_boolean(kind):
            return FieldSpec(field, "int", optional=optional)
        if types.is_floating(kind):
            return FieldSpec(field, "float", optional=optional)
        if types.is_binary(kind) or types.is_large_binary(kind):
            return FieldSpec(field, "bytes", optional=optional)
        if types.is_string(kind) or types.is_large_string(kind):
            return FieldSpec(field, "json" if _all_json(data.to_pylist()) else "text", optional=optional)
        return FieldSpec(field, "json", optional=optional)

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def key(self, index: int) -> str:
        return f"{os.path.basename(self.path)}:{index + 1}"

    def read(self, index: int) -> Union[FieldItem, Skipped]:
        key = self.key(index)
        row = self.table.slice(index, 1).to_pylist()[0]
        sample: Dict[str, Any] = {}
        total = 0
        for column, field in self.columns:
            value = row[column]
            if value is None:
                continue
            try:
                if field == IMAGE_FIELD:
                    value = self._image(value)
                elif self._kinds[field] == "label":
                    value = str(value)
                elif self._kinds[field] == "json" and isinstance(value, str):
                    value = json.loads(value)
            except OSError as exc:
                return Skipped(key, f"image {value!r} cannot be read ({exc.strerror or exc})")
            except (SampleError, ValueError, RecursionError) as exc:
                return Skipped(key, f"column {column!r}: {getattr(exc, 'problem', '') or exc}")
            sample[field] = value
            total += len(value) if isinstance(value, (bytes, str)) else 8
        return FieldItem(key, sample, total)

    def _image(self, value: Any) -> bytes:
        """An image cell's bytes: the encoded bytes it holds, or the file its relative path names."""
        if isinstance(value, dict):         # Hugging Face's image struct: bytes, or else a path
            value = value.get("bytes") or value.get("path")
            if value is None:
                raise SampleError("the image struct holds neither bytes nor a path")
        if isinstance(value, bytes):
            return value
        rel = str(value)
        if os.path.isabs(rel) or ".." in rel.replace("\\", "/").split("/") or "\0" in rel:
            raise SampleError(f"image path {rel!r} must be relative to the table's folder, without '..'")
        path = os.path.join(self.root, rel)
        return read_inside(self.real_root, path, link=os.path.islink(path))

    def summary(self) -> Dict[str, Any]:
        return {**super().summary(), "table": os.path.basename(self.path), "image_column": self.image_column}


def _all_json(values: List[Any]) -> bool:
    """Whether every present value is the JSON text of an array or an object."""
    present = [value for value in values if value is not None]
    if not present:
        return False
    for value in present:
        if not value.lstrip().startswith(("[", "{")):
            return False
        try:
            json.loads(value)
        except (ValueError, RecursionError):
            return False
    return True
