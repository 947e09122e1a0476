"""Stored field payloads -> values (docs/fields.md, "Reading"), and verify --deep's check of each
stored value: images decode, text is UTF-8, JSON parses (json.loads: data, never code), arrays
have their dtype and a shape that fits, labels lie within their classes.

Decode modes per field: images as a dataset of one payload decodes them ("pil", "numpy",
"tensor"); any mode but None gives text as str, JSON parsed, scalars as Python numbers, arrays as
numpy ("tensor": torch tensors); None gives what is stored (bytes, or the stored row).
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, Optional

import numpy as np

from ..errors import SampleError
from ..records import Payload
from ..schema import FieldSpec, SampleSchema
from .decode import array_to_numpy, check_payload_decodes, make_decoder, stored_bytes

#: A field's decoder: (its payload, its shape row for a variable-shape array) -> the value.
FieldDecoder = Callable[[Payload, Optional[Payload]], Any]


def field_decoder(spec: FieldSpec, schema: SampleSchema, mode: Optional[str]) -> FieldDecoder:
    """The decoder of one field (schema: its files' storage schema) for a decode mode."""
    if spec.variable and mode is not None:
        convert = array_to_tensor_plain if mode == "tensor" else array_to_numpy
        dtype = np.dtype(str(spec.dtype)).newbyteorder("<")

        def decode_variable(payload: Payload, shape: Optional[Payload] = None) -> Any:
            return convert(variable_array(payload, shape, dtype))
        return decode_variable
    value = _value_decoder(spec, schema, mode)

    def decode(payload: Payload, shape: Optional[Payload] = None) -> Any:
        return value(payload)
    return decode


def _value_decoder(spec: FieldSpec, schema: SampleSchema, mode: Optional[str]) -> Callable[[Payload], Any]:
    if spec.type == "image":
        return make_decoder(schema, mode)
    if mode is None:
        return _as_stored if schema.is_array else stored_bytes
    by_type: Dict[str, Callable[[Payload], Any]] = {
        "label": _first_int, "int": _first_int, "float": _first_float, "text": text_of, "json": json_of,
        "bytes": stored_bytes, "array": array_to_tensor_plain if mode == "tensor" else array_to_numpy}
    return by_type[spec.type]


def _as_stored(payload: Payload) -> Payload:
    return payload


def _first_int(payload: Payload) -> int:
    return int(np.asarray(payload).reshape(-1)[0])


def _first_float(payload: Payload) -> float:
    return float(np.asarray(payload).reshape(-1)[0])


def array_to_tensor_plain(payload: Payload) -> Any:
    """An array as a torch tensor of the same shape (zero-copy for a fresh array, else one copy)."""
    import torch
    array = array_to_numpy(payload)
    return torch.from_numpy(array if array.flags.writeable else np.array(array, copy=True))


def text_of(payload: Payload) -> str:
    try:
        return stored_bytes(payload).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SampleError(f"text is not UTF-8 ({exc.reason} at byte {exc.start})") from None


def json_of(payload: Payload) -> Any:
    text = text_of(payload)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise SampleError(f"JSON does not parse ({type(exc).__name__}: {str(exc)[:80]})") from None


def variable_array(payload: Payload, shape: Optional[Payload], dtype: np.dtype) -> np.ndarray:
    """A variable-shape array from its stored bytes and its shape row; SampleError when the shape
    does not fit the bytes (checked in Python integers: nothing is allocated from a stored shape)."""
    dims = [int(dim) for dim in np.asarray(shape).reshape(-1)] if shape is not None else []
    data = payload if isinstance(payload, np.ndarray) else np.frombuffer(payload, dtype=np.uint8)
    count = 1
    for dim in dims:
        count *= dim
    if not dims or min(dims) < 0 or count * dtype.itemsize != data.nbytes:
        raise SampleError(f"stored shape {tuple(dims)} does not fit its {data.nbytes} bytes of {dtype.name}")
    return data.reshape(-1).view(dtype).reshape(dims)


def check_field_value(spec: FieldSpec, schema: SampleSchema, payload: Payload) -> None:
    """verify --deep: SampleError unless a present stored value of one column is what its field
    says (the shape of a variable array against its data is checked by check_variable)."""
    if spec.type == "image":
        check_payload_decodes(schema, payload)
    elif spec.type == "text":
        text_of(payload)
    elif spec.type == "json":
        json_of(payload)
    elif spec.type == "label" and not 0 <= int(np.asarray(payload).reshape(-1)[0]) < len(spec.classes or ()):
        raise SampleError(f"label {int(np.asarray(payload).reshape(-1)[0])} is outside the field's "
                          f"{len(spec.classes or ())} classes")
    elif spec.type == "array" and spec.variable:
        size = np.dtype(str(spec.dtype)).itemsize
        if len(stored_bytes(payload)) % size:
            raise SampleError(f"holds {len(stored_bytes(payload))} bytes, not a whole number of {spec.dtype}")


def check_shape_row(spec: FieldSpec, row: Payload) -> None:
    """verify --deep: SampleError unless a variable array's stored shape has the field's fixed dims."""
    dims = [int(dim) for dim in np.asarray(row).reshape(-1)]
    fixed = [(want, got) for want, got in zip(spec.shape or (), dims) if want is not None]
    if any(dim < 0 for dim in dims) or any(want != got for want, got in fixed):
        raise SampleError(f"stored shape {tuple(dims)} does not fit the field's {tuple(spec.shape or ())}")


def check_variable(spec: FieldSpec, payload: Payload, row: Payload) -> None:
    """verify --deep: SampleError unless a variable array's stored shape fits its stored bytes."""
    variable_array(payload, row, np.dtype(str(spec.dtype)).newbyteorder("<"))
