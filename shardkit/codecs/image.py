"""Image codecs: check and (re-)encode one image file's bytes into a stored payload.

Each image mode is an ImageCodec. Shared by every format: "jpeg in LMDB" and "jpeg in HDF5"
run the same lines here.
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any, Dict, FrozenSet, Tuple

from ..errors import SampleError, UsageError
from ..records import Payload
from ..schema import LAYOUT_BYTES, SampleSchema

#: Pillow plugins that only identify files and cannot decode them.
_STUB_FORMATS = frozenset({"BUFR", "GRIB", "HDF5", "MPEG", "WMF"})
IMAGE_MODES = ("passthrough",)


def image_extensions() -> FrozenSet[str]:
    """Lower-case extensions (with dot) that Pillow registers for opening an image."""
    from PIL import Image
    Image.init()
    return frozenset(ext.lower() for ext, fmt in Image.registered_extensions().items()
                     if fmt in Image.OPEN and fmt not in _STUB_FORMATS)


def open_checked(data: bytes, *, draft: bool = False) -> Any:
    """Decode every byte of an image (JPEG at 1/8 DCT scale when draft) or raise SampleError.

    Pillow's decompression-bomb limit is enforced: exceeding MAX_IMAGE_PIXELS is an error here.
    """
    from PIL import Image
    if not data:
        raise SampleError("empty file (0 bytes)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if draft and image.format == "JPEG":
                image.draft("RGB", (max(1, image.width // 8), max(1, image.height // 8)))
            image.load()
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise SampleError(f"decompression bomb refused ({exc})") from None
    except Image.UnidentifiedImageError:
        raise SampleError("not an image Pillow can identify") from None
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types on damaged data (struct.error, ...)
        raise SampleError(f"image does not decode ({type(exc).__name__}: {exc})") from None
    return image


@dataclass(frozen=True)
class ImageCodec:
    """passthrough: store the file bytes unchanged after proving they decode."""

    mode: str = "passthrough"

    def schema(self, labeled: bool) -> SampleSchema:
        """The SampleSchema of datasets written with this codec."""
        return SampleSchema(kind="image", layout=LAYOUT_BYTES, labeled=labeled, codec=self.describe())

    def describe(self) -> Dict[str, Any]:
        """What the manifest records about this codec."""
        return {"image_mode": self.mode}

    def encode(self, data: bytes) -> Tuple[Payload, str]:
        """(payload to store, detected source format) for one file's bytes, or SampleError."""
        image = open_checked(data, draft=True)
        return data, str(image.format or "unknown")


def make_image_codec(mode: str = "passthrough", **options: Any) -> ImageCodec:
    """The codec for --image-mode and its options."""
    if mode not in IMAGE_MODES:
        raise UsageError(f"unknown image mode {mode!r}; choose one of {', '.join(IMAGE_MODES)}")
    return ImageCodec(mode=mode)
