"""Read-time decoding: stored payload -> PIL image, HWC numpy array, CHW tensor, or as stored."""
from __future__ import annotations

import io
from typing import Any, Callable, Optional

import numpy as np

from ..errors import UsageError
from ..records import Payload
from ..schema import SampleSchema

DECODE_MODES = ("pil", "numpy", "tensor", None)

Decoder = Callable[[Payload], Any]


def _as_bytes_io(payload: Payload) -> io.BytesIO:
    return io.BytesIO(payload if isinstance(payload, (bytes, bytearray)) else memoryview(payload))


def _decode_pil(payload: Payload) -> Any:
    from PIL import Image
    image = Image.open(_as_bytes_io(payload))
    return image.convert("RGB")


def _stored_bytes(payload: Payload) -> bytes:
    """An encoded payload as bytes: one copy out of the shard, which then pickles cheaply.

    DataLoader workers pickle every sample; a numpy view costs several times more there
    (benchmarks/read_throughput.py) than the one copy made here.
    """
    if type(payload) is bytes:
        return payload
    return payload.tobytes() if isinstance(payload, np.ndarray) else memoryview(payload).tobytes()


def _pil_to_numpy(image: Any) -> np.ndarray:
    return np.asarray(image)


def _numpy_to_tensor(array: np.ndarray) -> Any:
    import torch
    if array.ndim == 2:
        array = array[:, :, None]
    return torch.from_numpy(np.array(array, copy=True)).permute(2, 0, 1)


def make_decoder(schema: SampleSchema, mode: Optional[str]) -> Decoder:
    """A function from stored payload to the sample the user asked for."""
    if mode not in DECODE_MODES:
        raise UsageError(f"unknown decode mode {mode!r}; choose pil, numpy, tensor or None")
    if schema.kind != "image":
        from .tabular import make_tabular_decoder  # noqa: F401 - provided by the tabular codec
        return make_tabular_decoder(schema, mode)
    if mode is None:
        return (lambda payload: payload) if schema.is_array else _stored_bytes
    if schema.is_array:
        if mode == "numpy":
            return lambda payload: np.array(payload, copy=True)
        if mode == "tensor":
            return _numpy_to_tensor
        from PIL import Image
        return lambda payload: Image.fromarray(np.ascontiguousarray(payload))
    if mode == "pil":
        return _decode_pil
    if mode == "numpy":
        return lambda payload: _pil_to_numpy(_decode_pil(payload))
    return lambda payload: _numpy_to_tensor(_pil_to_numpy(_decode_pil(payload)))


def check_payload_decodes(schema: SampleSchema, payload: Payload) -> None:
    """Raise SampleError unless the payload decodes fully (used by verify --deep)."""
    if schema.kind == "image" and not schema.is_array:
        from .image import open_checked
        open_checked(bytes(payload))
