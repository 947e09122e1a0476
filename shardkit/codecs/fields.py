"""Field values -> stored payloads: what each field type stores, in which of today's layouts
(formats/fields.md), and the schema a writer infers from a first sample.

Every field is a column of ordinary single-field shard files: values of variable length (encoded
images, text, bytes, JSON, a variable-shape array's data) in the bytes layout, fixed-width values
(int64 and float64 scalars, class labels, fixed-shape arrays, raw images) in the array layout. A
variable-shape array also fills its companion column `<name>.shape` with each value's shape.
The label column of every field file holds presence: 0 where the sample has a value, -1 where an
optional field is absent (the payload is then empty, or a row of zeros).
"""
from __future__ import annotations

import io
import json
import operator
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from ..errors import SampleError
from ..records import NO_LABEL, Payload
from ..schema import LAYOUT_ARRAY, LAYOUT_BYTES, SHAPE_SUFFIX, FieldSpec, SampleSchema
from .image import ImageCodec, make_image_codec
from .validate import sniff

#: Presence, in a field file's label column.
PRESENT = 0
ABSENT = NO_LABEL
#: The stored dtype of each scalar type (one value a row, shape (1,)).
SCALAR_DTYPES = {"label": "int64", "int": "int64", "float": "float64"}
#: The stored dtypes of scalars and shapes, made once (a dtype named by a string is parsed each time).
_INT64, _FLOAT64 = np.dtype("<i8"), np.dtype("<f8")


def image_codec(spec: FieldSpec) -> ImageCodec:
    """The image codec of an image field (its mode, with raw's size and the re-encoders' options)."""
    return make_image_codec(spec.mode or "passthrough", resize=spec.resize,
                            size=None if spec.size is None else tuple(spec.size), quality=spec.quality,
                            validate=spec.validate or "full")


def storage_schema(spec: FieldSpec) -> SampleSchema:
    """The schema of a field's own files: a single-field shard of today's layouts, unlabeled (its
    label column is presence). Its codec records the field, which decoding and checks read."""
    codec: Dict[str, Any] = {"field": spec.to_dict()}
    if spec.type == "image":
        image = image_codec(spec).schema(labeled=False)
        layout, dtype, shape = image.layout, image.dtype, image.shape
        codec = {**image.codec, **codec}
    elif spec.type in SCALAR_DTYPES:
        layout, dtype, shape = LAYOUT_ARRAY, SCALAR_DTYPES[spec.type], (1,)
    elif spec.type == "array" and not spec.variable:
        layout, dtype, shape = LAYOUT_ARRAY, str(spec.dtype), tuple(int(dim or 0) for dim in spec.shape or ())
    else:
        layout, dtype, shape = LAYOUT_BYTES, "uint8", ()
    return SampleSchema(kind=spec.type, layout=layout, dtype=dtype, shape=shape, labeled=False, codec=codec,
                        compression=spec.compression)


def shape_schema(spec: FieldSpec) -> SampleSchema:
    """The schema of a variable-shape array's companion files: each value's shape, int64 rows."""
    return SampleSchema(kind="shape", layout=LAYOUT_ARRAY, dtype="int64", shape=(len(spec.shape or ()),),
                        labeled=False, codec={"field": spec.to_dict(), "shape_of": spec.name})


def column_schemas(schema: SampleSchema) -> Dict[str, SampleSchema]:
    """Each stored column of a schema of fields -> the schema of its files, in column order."""
    out: Dict[str, SampleSchema] = {}
    for spec in schema.fields:
        out[spec.name] = storage_schema(spec)
        if spec.variable:
            out[spec.name + SHAPE_SUFFIX] = shape_schema(spec)
    return out


class FieldEncoder:
    """A field's values -> its columns' payloads; SampleError saying what is wrong with a value."""

    def __init__(self, spec: FieldSpec) -> None:
        self.spec = spec
        self.schema = storage_schema(spec)
        self._dtype = np.dtype(spec.dtype).newbyteorder("<") if spec.dtype else None
        self._codec = image_codec(spec) if spec.type == "image" else None
        self._encode: Callable[[Any], Any] = getattr(self, "_" + spec.type)
        # read for every value: the spec's derived properties, worked out once
        self.optional, self.variable, self._scalar = spec.optional, spec.variable, spec.type in SCALAR_DTYPES
        self._shape = tuple(spec.shape or ())
        fixed = [index for index, size in enumerate(self._shape) if size is not None]
        #: the sizes of the dimensions an array field fixes, picked from a shape (None: it fixes none)
        self._fixed_dims = operator.itemgetter(*fixed) if fixed else None
        self._fixed_sizes = self._fixed_dims(self._shape) if self._fixed_dims is not None else None
        self._absent = tuple(_absent_payload(schema) for schema in column_schemas_of(spec).values())

    def encode(self, value: Any) -> Tuple[Payload, ...]:
        """The payload of each of the field's columns for one value (present), in column order:
        bytes, or a C-contiguous array (so zlib's CRC-32 reads either as it is stored)."""
        if self._scalar:
            value = _scalar(value)
        if self.variable:
            return self._encode(value)
        return (self._encode(value),)

    def absent(self) -> Tuple[Payload, ...]:
        """The payloads of an absent optional value: empty bytes, or a row of zeros (made once)."""
        return self._absent

    # ---- one method per field type: the value -> its payload -----------------------------
    def _image(self, value: Any) -> Payload:
        assert self._codec is not None
        payload, _ = self._codec.encode(image_bytes(value))
        return payload

    def _label(self, value: Any) -> Payload:
        classes = self.spec.classes or ()
        if isinstance(value, str):
            if value not in classes:
                raise SampleError(f"class {value!r} is not one of the field's {len(classes)} classes")
            value = classes.index(value)
        number = _whole_number(value, "a class (its name or its number)")
        if not 0 <= number < len(classes):
            raise SampleError(f"label {number} is outside the field's {len(classes)} classes")
        return np.array([number], dtype=_INT64)

    def _int(self, value: Any) -> Payload:
        return np.array([_whole_number(value, "an integer", bools=True)], dtype=_INT64)

    def _float(self, value: Any) -> Payload:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise SampleError(f"expected a number, got {_kind(value)}")
        return np.array([float(value)], dtype=_FLOAT64)

    def _text(self, value: Any) -> Payload:
        if not isinstance(value, str):
            raise SampleError(f"expected text (str), got {_kind(value)}")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SampleError(f"text is not valid Unicode ({exc.reason} at character {exc.start})") from None

    def _bytes(self, value: Any) -> Payload:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise SampleError(f"expected bytes, got {_kind(value)}")
        return bytes(value)

    def _json(self, value: Any) -> Payload:
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"), default=_plain)
        except (TypeError, ValueError, RecursionError) as exc:
            raise SampleError(f"is not JSON ({exc})") from None
        return text.encode("utf-8")

    def _array(self, value: Any) -> Any:
        array = as_array(value, self._dtype)
        if array.ndim != len(self._shape) or (self._fixed_dims is not None
                                              and self._fixed_dims(array.shape) != self._fixed_sizes):
            raise SampleError(f"has shape {tuple(array.shape)}, the field's is {_shape_text(self._shape)}")
        if not self.variable:
            return np.ascontiguousarray(array, dtype=self._dtype)
        data = array.tobytes() if array.dtype == self._dtype else np.ascontiguousarray(array, self._dtype).tobytes()
        return data, np.array(array.shape, dtype=_INT64)


def _absent_payload(schema: SampleSchema) -> Payload:
    """What a column stores for an absent value: empty bytes, or a (read-only) row of zeros."""
    if not schema.is_array:
        return b""
    zeros = np.zeros(schema.shape, dtype=schema.dtype)
    zeros.flags.writeable = False
    return zeros


def column_schemas_of(spec: FieldSpec) -> Dict[str, SampleSchema]:
    """The columns of one field and their files' schemas."""
    return column_schemas(SampleSchema.of_fields([spec]))


def image_bytes(value: Any) -> bytes:
    """An image value as encoded bytes: bytes as given, a PIL image or an (H, W[, C]) uint8 array
    encoded as PNG (lossless); SampleError for anything else."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    image = value
    if isinstance(value, np.ndarray):
        if value.dtype != np.uint8 or value.ndim not in (2, 3) or (value.ndim == 3 and value.shape[2] not in (1, 3, 4)):
            raise SampleError(f"an image array must be uint8 (H, W) or (H, W, 1|3|4), not {value.dtype} "
                              f"{tuple(value.shape)}")
        from PIL import Image
        image = Image.fromarray(value[:, :, 0] if value.ndim == 3 and value.shape[2] == 1 else value)
    if type(image).__module__.startswith("PIL.") and hasattr(image, "save"):
        out = io.BytesIO()
        try:
            image.save(out, "PNG", compress_level=6)
        except (OSError, ValueError) as exc:
            raise SampleError(f"cannot encode the image as PNG ({exc})") from None
        return out.getvalue()
    raise SampleError(f"expected an image (encoded bytes, a PIL image or a uint8 HWC array), got {_kind(value)}")


def as_array(value: Any, dtype: Optional[np.dtype]) -> np.ndarray:
    """A numpy array of an array field's value: an ndarray or tensor of exactly the field's dtype,
    or a (nested) list of numbers that the dtype holds without loss."""
    if type(value) is np.ndarray and (dtype is None or value.dtype == dtype):
        return value                    # the usual value, without the checks below
    if type(value).__module__.startswith("torch"):
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if dtype is not None and value.dtype.newbyteorder("=") != dtype.newbyteorder("="):
            raise SampleError(f"has dtype {value.dtype.name}, the field's is {dtype.name}")
        return value
    if isinstance(value, (list, tuple)):
        try:
            array = np.asarray(value)
        except ValueError as exc:
            raise SampleError(f"is not a regular array ({exc})") from None
        if array.dtype.kind not in "biuf" or (dtype is not None and not np.can_cast(array.dtype, dtype, "safe")
                                              and array.size):
            raise SampleError(f"holds {array.dtype.name} values, which {dtype.name if dtype else '?'} cannot hold")
        return array.astype(dtype) if dtype is not None else array
    raise SampleError(f"expected an array (numpy, torch or a list), got {_kind(value)}")


def _scalar(value: Any) -> Any:
    """A 0-d numpy array or torch tensor as its scalar; anything else as it is."""
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return value.item()
    return value


def _whole_number(value: Any, what: str, bools: bool = False) -> int:
    if (isinstance(value, (bool, np.bool_)) and not bools) or not isinstance(value, (int, np.integer, np.bool_)):
        raise SampleError(f"expected {what}, got {_kind(value)}")
    if not -2 ** 63 <= int(value) < 2 ** 63:
        raise SampleError(f"{int(value)} does not fit in 64 bits")
    return int(value)


def _plain(value: Any) -> Any:
    """json.dumps's fallback: numpy scalars and arrays as plain numbers and lists."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"{_kind(value)} is not JSON serializable")


def _kind(value: Any) -> str:
    name = type(value).__name__
    return f"{name} {value.dtype}" if hasattr(value, "dtype") else name


def _shape_text(shape: Tuple[Optional[int], ...]) -> str:
    return "(" + ", ".join("any" if dim is None else str(dim) for dim in shape) + ")"


def infer_field(name: str, value: Any) -> FieldSpec:
    """The field a first sample's value implies (docs/fields.md, "Schema inference"): bytes that
    start like an image file -> image (passthrough), other bytes -> bytes, a PIL image -> image
    (passthrough, stored as PNG), str -> text, bool and integers -> int, floats -> float, dict and list -> json,
    a numpy array or torch tensor -> array of its dtype and shape; None cannot be inferred."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            sniff(bytes(value[:16]))
            return FieldSpec(name, "image")
        except SampleError:
            return FieldSpec(name, "bytes")
    if type(value).__module__.startswith("PIL.") and hasattr(value, "save"):
        return FieldSpec(name, "image")
    value = _scalar(value)
    if isinstance(value, str):
        return FieldSpec(name, "text")
    if isinstance(value, (bool, int, np.integer, np.bool_)):
        return FieldSpec(name, "int")
    if isinstance(value, (float, np.floating)):
        return FieldSpec(name, "float")
    if isinstance(value, (dict, list, tuple)):
        return FieldSpec(name, "json")
    if isinstance(value, np.ndarray) or type(value).__module__.startswith("torch"):
        array = as_array(value, None)
        return FieldSpec(name, "array", dtype=array.dtype.name, shape=tuple(array.shape) or (1,))
    raise SampleError(f"cannot infer a field type from {_kind(value)}; declare the field with fields=")
