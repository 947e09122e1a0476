"""SampleSchema: what one sample is, recorded in the manifest so readers need no flags."""
from __future__ import annotations

import dataclasses
import re
from dataclasses import asdict, dataclass, field, replace
from functools import cached_property
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .errors import UsageError

#: Payload layouts a format must store: variable-length bytes, or a fixed-shape array.
LAYOUT_BYTES = "bytes"
LAYOUT_ARRAY = "array"
COMPRESSIONS = ("none", "gzip", "lzf")


@dataclass(frozen=True)
class SampleSchema:
    """The shape of every sample in a dataset: kind, payload layout, codec and compression."""

    kind: str                                   # "image" | "tabular"
    layout: str = LAYOUT_BYTES                  # "bytes" | "array"
    dtype: str = "uint8"                        # array element type (layout "array")
    shape: Tuple[int, ...] = ()                 # array shape (layout "array")
    labeled: bool = True
    codec: Dict[str, Any] = field(default_factory=dict)   # e.g. {"image_mode": "passthrough"}
    compression: str = "none"
    compression_level: Optional[int] = None
    columns: List[Dict[str, Any]] = field(default_factory=list)  # tabular: name, type, vocabulary
    fields: Tuple["FieldSpec", ...] = ()        # kind "fields": the named fields of every sample

    @classmethod
    def of_fields(cls, fields: Sequence["FieldSpec"]) -> "SampleSchema":
        """The schema of samples of these named fields."""
        return cls(kind=FIELDS_KIND, labeled=False, fields=check_fields(fields))

    @property
    def is_array(self) -> bool:
        """True when every payload is a fixed-shape array rather than bytes."""
        return self.layout == LAYOUT_ARRAY

    @cached_property
    def sample_nbytes(self) -> int:
        """Bytes of one fixed-shape array sample (0 for bytes layout); computed once per schema,
        since every array read checks a length against it."""
        if not self.is_array:
            return 0
        import numpy as np
        count = 1
        for dim in self.shape:
            count *= int(dim)
        return count * np.dtype(self.dtype).itemsize

    def to_dict(self) -> Dict[str, Any]:
        """Plain JSON-ready dict (a schema of fields: its kind and fields only)."""
        if self.kind == FIELDS_KIND:
            return {"kind": FIELDS_KIND, "fields": [spec.to_dict() for spec in self.fields]}
        data = asdict(replace(self, columns=[], fields=()))
        del data["fields"]
        # columns hold names and string lists only: copied directly (asdict deep-copies each vocabulary entry)
        data["columns"] = [{key: list(value) if isinstance(value, (list, tuple)) else value
                            for key, value in column.items()} for column in self.columns]
        data["shape"] = list(self.shape)
        return data

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SampleSchema":
        """Inverse of to_dict."""
        if isinstance(data, dict) and data.get("kind") == FIELDS_KIND:
            if set(data) != {"kind", "fields"} or not isinstance(data["fields"], list):
                raise UsageError("a schema of fields holds its kind and a list of fields only")
            return cls.of_fields([FieldSpec.from_dict(item) for item in data["fields"]])
        data = dict(data)
        data["shape"] = tuple(data.get("shape", ()))
        return cls(**data)


# ---- Samples of named fields (manifest version 2) -------------------------------------------
#: The kinds of value a field holds (docs/fields.md, "Schema reference").
FIELD_TYPES = ("image", "label", "int", "float", "text", "bytes", "json", "array")
#: What a field's name may be: it names the field's files (shard-00000.<name>.h5), so letters,
#: digits, "_" and "-" only, starting with a letter or digit, at most 64 characters.
_FIELD_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}\Z")
#: The name suffix of a variable-shape array's companion column (each value's shape).
SHAPE_SUFFIX = ".shape"
#: The schema kind of datasets of named fields.
FIELDS_KIND = "fields"


@dataclass(frozen=True)
class FieldSpec:
    """One named field of a sample: its type, whether samples may lack it, and per type what its
    values are (image: the image mode, and `size` for raw; label: the class names; array: dtype and
    shape, None for a dimension that varies from sample to sample)."""

    name: str
    type: str
    optional: bool = False
    mode: Optional[str] = None                      # image: an image mode (None: passthrough)
    size: Optional[Tuple[int, int]] = None          # image, raw mode: (H, W)
    resize: Optional[int] = None                    # image, jpeg/png/webp: shorter side
    quality: Optional[int] = None                   # image, jpeg/webp
    validate: Optional[str] = None                  # image, passthrough: full (None), fast or none
    classes: Optional[Tuple[str, ...]] = None       # label: class names in label order
    dtype: Optional[str] = None                     # array: numpy dtype name
    shape: Optional[Tuple[Optional[int], ...]] = None   # array: dims, None where they vary
    compression: str = "none"                       # of the field's files: none, gzip (all formats), lzf (HDF5)

    def __post_init__(self) -> None:
        for name, value in (("size", self.size), ("classes", self.classes), ("shape", self.shape)):
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        if self.dtype is not None:
            object.__setattr__(self, "dtype", _dtype_name(self.dtype))
        problem = self._problem()
        if problem:
            raise UsageError(f"field {self.name!r}: {problem}")

    def _problem(self) -> Optional[str]:
        if not isinstance(self.name, str) or not _FIELD_NAME.match(self.name):
            return "a field name is 1-64 letters, digits, '_' or '-', starting with a letter or digit"
        if self.type not in FIELD_TYPES:
            return f"unknown type {self.type!r}; choose one of {', '.join(FIELD_TYPES)}"
        if self.compression not in COMPRESSIONS:
            return f"compression must be one of {', '.join(COMPRESSIONS)}, not {self.compression!r}"
        image_only = [key for key in ("mode", "size", "resize", "quality", "validate")
                      if getattr(self, key) is not None]
        if image_only and self.type != "image":
            return f"{', '.join(image_only)} apply to image fields only"
        if (self.classes is None) != (self.type != "label"):
            return "a label field needs its classes (a list of names), and only a label field has them"
        if self.classes is not None and (not self.classes or not all(isinstance(c, str) for c in self.classes)
                                         or len(set(self.classes)) != len(self.classes)):
            return "classes must be distinct names (strings), at least one"
        if (self.dtype is None or self.shape is None) != (self.type != "array"):
            return "an array field needs its dtype and shape, and only an array field has them"
        if self.type == "array":
            return _array_problem(self.dtype, self.shape)
        return None

    @property
    def variable(self) -> bool:
        """Whether the values' shapes vary (an array with a None dimension): each value's shape is
        then stored in the companion column `<name>.shape`."""
        return self.shape is not None and any(dim is None for dim in self.shape)

    @property
    def columns(self) -> Tuple[str, ...]:
        """The stored columns of this field: its own, and `<name>.shape` for a variable array."""
        return (self.name, self.name + SHAPE_SUFFIX) if self.variable else (self.name,)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready, without the keys a type does not use."""
        data: Dict[str, Any] = {"name": self.name, "type": self.type, "optional": self.optional}
        for key in ("mode", "size", "resize", "quality", "validate", "classes", "dtype", "shape"):
            value = getattr(self, key)
            if value is not None:
                data[key] = list(value) if isinstance(value, tuple) else value
        if self.compression != "none":
            data["compression"] = self.compression
        return data

    @classmethod
    def from_dict(cls, data: Any) -> "FieldSpec":
        """Inverse of to_dict; UsageError naming what is wrong."""
        if not isinstance(data, dict) or "name" not in data or "type" not in data:
            raise UsageError(f"a field is an object with a name and a type, not {str(data)[:80]!r}")
        known = {item.name for item in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(f"field {data.get('name')!r}: unknown key {unknown[0]!r}")
        return cls(**data)


def _dtype_name(dtype: Any) -> Any:
    """numpy's name of a dtype given in any spelling numpy takes ("f4", np.float32); as given when
    numpy does not take it (the field's check names it)."""
    import numpy as np
    try:
        return np.dtype(dtype).name
    except TypeError:
        return dtype


def _array_problem(dtype: Any, shape: Any) -> Optional[str]:
    """Why an array field's dtype or shape cannot be stored, or None."""
    import numpy as np
    try:
        kind = np.dtype(dtype)
    except TypeError:
        return f"dtype {dtype!r} is not a numpy dtype"
    if kind.kind not in "biuf" or kind.str != np.dtype(kind.name).str or kind.itemsize > 8:
        return f"dtype {dtype!r} is not a plain bool, integer or float dtype (at most 8 bytes)"
    if not isinstance(shape, tuple) or not 1 <= len(shape) <= 8 \
            or not all(dim is None or (type(dim) is int and 0 < dim < 2 ** 31) for dim in shape):
        return f"shape must list 1 to 8 dimensions, each a positive size or None (varies), not {shape!r}"
    return None


def check_fields(fields: Sequence[FieldSpec]) -> Tuple[FieldSpec, ...]:
    """The fields as a tuple, once they are at least one and their names distinct (UsageError)."""
    fields = tuple(fields)
    if not fields:
        raise UsageError("a sample needs at least one field")
    names = [spec.name for spec in fields]
    for name in names:
        if names.count(name) > 1:
            raise UsageError(f"field {name!r} is declared twice")
    return fields
