"""Read-time decoding: stored payload -> PIL image, HWC numpy array, CHW tensor, or as stored.

Everything needed comes from the manifest's schema, so readers take no image flags:
encoded images (passthrough, jpeg, png, webp) are decoded with the same colour handling as
conversion (EXIF orientation, alpha over the recorded background, 8-bit RGB); raw arrays are
returned without any decode.

Zero-copy rule for raw arrays: a reader returns either a fresh array it does not keep
(compressed data, decompressed per read) or a view of shared memory (an mmap). Fresh arrays
are handed on as they are (tensor: torch.from_numpy, no copy); read-only views are handed on
as read-only numpy arrays, and copied once for tensors, because torch has no read-only tensors
and a write into a mapped shard would crash or change later reads.
"""
from __future__ import annotations

import io
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import SampleError, UsageError
from ..records import NO_LABEL, Encoded, Payload
from ..schema import FieldSpec, SampleSchema

DECODE_MODES = ("pil", "numpy", "tensor", None)

Decoder = Callable[[Payload], Any]


def _as_bytes_io(payload: Payload) -> io.BytesIO:
    return io.BytesIO(payload if isinstance(payload, (bytes, bytearray)) else memoryview(payload))


def _is_private(array: np.ndarray) -> bool:
    """True for a fresh array nobody else holds: writable and owning its memory."""
    return bool(array.flags.writeable and array.flags.owndata)


def array_to_numpy(payload: Payload) -> np.ndarray:
    """A raw payload as an HWC array without copying, unless it is a writable view of memory
    the reader keeps (then a copy, so writes cannot reach later reads)."""
    array = payload if isinstance(payload, np.ndarray) else np.asarray(payload)
    if array.flags.writeable and not array.flags.owndata:
        return np.array(array, copy=True)
    return array


def stored_bytes(payload: Payload) -> bytes:
    """An encoded payload as bytes: one copy out of the shard, which then pickles cheaply.

    DataLoader workers pickle every sample; a numpy view costs several times more there
    (benchmarks/read_throughput.py) than the one copy made here.
    """
    if type(payload) is bytes:
        return payload
    return payload.tobytes() if isinstance(payload, np.ndarray) else memoryview(payload).tobytes()


def array_to_tensor(payload: Payload) -> Any:
    """A raw HWC payload as a CHW uint8 tensor: zero-copy for a fresh array, else one copy."""
    import torch
    array = payload if isinstance(payload, np.ndarray) else np.asarray(payload)
    if array.ndim == 2:
        array = array[:, :, None]
    if not _is_private(array):
        array = np.array(array, copy=True)
    return torch.from_numpy(array).permute(2, 0, 1)


def _background(schema: SampleSchema) -> Tuple[int, int, int]:
    from .image import DEFAULT_BACKGROUND, parse_background
    return parse_background(schema.codec.get("background", DEFAULT_BACKGROUND))


def max_image_pixels(schema: SampleSchema) -> int:
    """The pixel limit the manifest records (--max-image-pixels; the default for older datasets)."""
    from .pillow import DEFAULT_MAX_IMAGE_PIXELS
    value = schema.codec.get("max_image_pixels")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else DEFAULT_MAX_IMAGE_PIXELS


def make_image_decoder(background: Tuple[int, int, int] = (255, 255, 255), formats: Sequence[str] = (),
                       max_pixels: Optional[int] = None) -> Callable[[Payload], Any]:
    """payload bytes -> upright 8-bit RGB PIL image (the conversion's colour handling); only
    images in `formats` (default: every allowed format) of at most max_pixels are opened, and
    whatever goes wrong in Pillow is a SampleError (the dataset adds shard and index)."""
    from .pillow import DEFAULT_MAX_IMAGE_PIXELS, IMAGE_FORMATS
    allowed = tuple(formats) or IMAGE_FORMATS
    limit = max_pixels or DEFAULT_MAX_IMAGE_PIXELS

    def decode(payload: Payload) -> Any:
        from .image import apply_orientation, to_rgb
        from .pillow import decode_fully
        return to_rgb(apply_orientation(decode_fully(_as_bytes_io(payload), allowed, limit)), background)
    return decode


def _pil_to_tensor(image: Any) -> Any:
    import torch
    return torch.from_numpy(np.array(image)).permute(2, 0, 1)


def image_formats(schema: SampleSchema, source: Optional[Dict[str, Any]] = None) -> Tuple[str, ...]:
    """The image formats a dataset's manifest allows its encoded samples to be in."""
    from .image import recorded_formats
    detected = ((source or {}).get("summary") or {}).get("detected") if isinstance(source, dict) else None
    return recorded_formats(schema.codec, detected)


def make_decoder(schema: SampleSchema, mode: Optional[str], source: Optional[Dict[str, Any]] = None) -> Decoder:
    """A function from stored payload to the sample the user asked for; `source` is the
    manifest's source record, which says which image formats the samples may be in."""
    if mode not in DECODE_MODES:
        raise UsageError(f"unknown decode mode {mode!r}; choose pil, numpy, tensor or None")
    if schema.kind != "image":
        from .tabular import make_tabular_decoder  # noqa: F401 - provided by the tabular codec
        return make_tabular_decoder(schema, mode)
    if mode is None:
        return (lambda payload: payload) if schema.is_array else stored_bytes
    if schema.is_array:
        if mode == "numpy":
            return array_to_numpy
        if mode == "tensor":
            return array_to_tensor
        from PIL import Image
        return lambda payload: Image.fromarray(np.ascontiguousarray(payload))
    decode_pil = make_image_decoder(_background(schema), image_formats(schema, source), max_image_pixels(schema))
    if mode == "pil":
        return decode_pil
    if mode == "numpy":
        return lambda payload: np.asarray(decode_pil(payload))
    return lambda payload: _pil_to_tensor(decode_pil(payload))


def check_payload_decodes(schema: SampleSchema, payload: Payload,
                          source: Optional[Dict[str, Any]] = None) -> None:
    """Raise SampleError unless the payload decodes fully in a format the manifest's source
    record allows (used by verify --deep)."""
    if schema.kind == "image" and not schema.is_array:
        from .pillow import decode_image
        decode_image(bytes(payload), formats=image_formats(schema, source), max_pixels=max_image_pixels(schema))


def check_stored(schema: SampleSchema, encoded: Encoded, source: Optional[Dict[str, Any]] = None) -> None:
    """verify --deep: SampleError unless a stored record is what its schema says: an encoded image
    decodes, and in a field's file (a dataset of named fields) the value is one of its field's
    (codecs/field_decode.py) and its presence is 0, or -1 for an absent optional value."""
    field = schema.codec.get("field")
    if field is None:
        check_payload_decodes(schema, encoded.payload, source)
        return
    from .field_decode import check_field_value, check_shape_row
    spec = FieldSpec.from_dict(field)
    if encoded.label not in (0, NO_LABEL):
        raise SampleError(f"presence {encoded.label}, not 0 (present) or -1 (absent)")
    if encoded.label == NO_LABEL:
        if not spec.optional:
            raise SampleError(f"field {spec.name!r} is required but absent")
    elif "shape_of" in schema.codec:
        check_shape_row(spec, encoded.payload)
    else:
        check_field_value(spec, schema, encoded.payload)
