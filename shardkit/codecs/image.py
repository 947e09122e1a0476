"""Image codecs: check and (re-)encode one image file's bytes into a stored payload.

Every image mode is one ImageCodec, shared by every format: "jpeg in LMDB" and "jpeg in HDF5"
run the same lines here. The colour handling (EXIF orientation, alpha on a background,
16-bit and CMYK to 8-bit RGB) is also used at read time by codecs/decode.py, so passthrough
reads and converted modes start from the same pixels.

  passthrough       the file bytes unchanged, after proving they decode (--validate full;
                    fast and none check less, see codecs/validate.py)
  jpeg | png | webp decoded, oriented, RGB, optionally resized (shorter side), re-encoded
  raw               decoded, oriented, RGB, resized to cover H x W and center-cropped: uint8 (H, W, 3)
"""
from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from ..errors import SampleError, UsageError
from ..records import Payload
from ..schema import LAYOUT_ARRAY, LAYOUT_BYTES, SampleSchema
from .pillow import _REPORTED_AS, DEFAULT_MAX_IMAGE_PIXELS, IMAGE_FORMATS, check_max_image_pixels, decode_image
from .validate import DEFAULT_VALIDATE, check_structure, check_validate, sniff

IMAGE_MODES = ("passthrough", "jpeg", "png", "webp", "raw")
DEFAULT_IMAGE_MODE = "passthrough"
#: Colour behind transparent pixels (--background), as #rrggbb.
DEFAULT_BACKGROUND = "#ffffff"
REENCODE_MODES = ("jpeg", "png", "webp")
LOSSY_MODES = ("jpeg", "webp")
DEFAULT_QUALITY = 90
#: Largest --resize / --size side (WebP's limit is 16383; larger training images are unusual).
MAX_SIDE = 16384
#: Resampling filter of --resize and of raw mode's resize (Pillow's Lanczos, antialiased).
RESAMPLE = "lanczos"
#: JPEG sources are decoded at a reduced DCT scale only while both sides stay at least this
#: many times the size needed (as Pillow's thumbnail does), so quality is unaffected.
DRAFT_GAP = 2
#: Encoder settings, pinned so the same pixels always give the same bytes. No metadata
#: (EXIF, ICC, XMP, comments, dpi) is written.
ENCODERS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "jpeg": ("JPEG", {"subsampling": "4:2:0", "optimize": True, "progressive": False}),
    "png": ("PNG", {"compress_level": 6, "optimize": False}),
    "webp": ("WEBP", {"method": 4, "lossless": False, "exact": False}),
}
#: EXIF orientation -> transpose, the table of PIL.ImageOps.exif_transpose.
_ORIENTATION = {2: "FLIP_LEFT_RIGHT", 3: "ROTATE_180", 4: "FLIP_TOP_BOTTOM", 5: "TRANSPOSE",
                6: "ROTATE_270", 7: "TRANSVERSE", 8: "ROTATE_90"}
_ALPHA_MODES = frozenset({"RGBA", "RGBa", "LA", "La", "PA"})
_WIDE_GRAY_MODES = frozenset({"I", "I;16", "I;16L", "I;16B", "I;16N"})


def recorded_formats(codec: Dict[str, Any], detected: Any = None) -> Tuple[str, ...]:
    """The formats a dataset's encoded images may be in, from what its manifest records: the
    encoder of a re-encoding mode, else the detected source formats (all of IMAGE_FORMATS when
    the manifest does not say); never anything outside IMAGE_FORMATS."""
    encoder = codec.get("encoder")
    if codec.get("image_mode") in REENCODE_MODES and encoder in IMAGE_FORMATS:
        return (str(encoder),)
    if isinstance(detected, dict) and detected:
        names = {_REPORTED_AS.get(str(name), str(name)) for name in detected}
        return tuple(name for name in IMAGE_FORMATS if name in names)
    return IMAGE_FORMATS


def apply_orientation(image: Any) -> Any:
    """The image turned upright by its EXIF Orientation tag (values 2-8; anything else,
    or EXIF that cannot be parsed, leaves it as stored)."""
    from PIL import Image
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")         # Pillow warns about corrupt EXIF; we ignore it
            orientation = image.getexif().get(0x0112, 1)
    except Exception:  # noqa: BLE001 - unparsable EXIF is ignored, like viewers do
        return image
    if not isinstance(orientation, int) or orientation not in _ORIENTATION:
        return image
    return image.transpose(getattr(Image.Transpose, _ORIENTATION[orientation]))


def to_rgb(image: Any, background: Tuple[int, int, int] = (255, 255, 255)) -> Any:
    """8-bit RGB pixels of any Pillow image.

    Transparency (alpha channel, palette or tRNS colour) is composited over background;
    16/32-bit grayscale is scaled from 0-65535 to 0-255; float grayscale is clipped to 0-255;
    CMYK, YCbCr, palette, 1-bit and grayscale use Pillow's conversion. ICC profiles are not
    applied: pixel values are taken as sRGB, as Pillow's own convert("RGB") does.
    """
    from PIL import Image
    if image.mode == "RGB" and "transparency" not in image.info:
        return image
    if image.mode in _WIDE_GRAY_MODES:
        image = Image.fromarray(_narrow_gray(np.asarray(image)), mode="L")
    elif image.mode == "F":
        image = image.convert("L")
    try:
        if image.mode in _ALPHA_MODES or "transparency" in image.info:
            rgba = image.convert("RGBA")
            canvas = Image.new("RGBA", rgba.size, tuple(background) + (255,))
            canvas.alpha_composite(rgba)
            return canvas.convert("RGB")
        return image.convert("RGB")
    except ValueError as exc:
        raise SampleError(f"colour mode {image.mode} cannot be converted to RGB ({exc})") from None


def _narrow_gray(wide: np.ndarray) -> np.ndarray:
    """16/32-bit grey (clipped to 0-65535) scaled to uint8, rounded, in blocks of about 256K
    pixels: a few bytes per pixel in all, not the 8+ of one int64 array of the whole image."""
    narrow = np.empty(wide.shape, dtype=np.uint8)
    rows = max(1, (1 << 18) // max(1, wide.shape[1] if wide.ndim > 1 else 1))
    for top in range(0, wide.shape[0], rows):
        block = np.clip(wide[top:top + rows], 0, 65535).astype(np.uint32)
        narrow[top:top + rows] = (block * 255 + 32767) // 65535
    return narrow


def parse_background(value: Any) -> Tuple[int, int, int]:
    """An opaque RGB colour from any form Pillow's ImageColor understands, or UsageError."""
    from PIL import ImageColor
    if isinstance(value, (tuple, list)) and len(value) == 3 and all(isinstance(v, int) for v in value):
        value = "#%02x%02x%02x" % tuple(value)
    try:
        rgb = ImageColor.getrgb(str(value))
    except ValueError:
        raise UsageError(f"--background {value!r} is not a colour (use a name like white, #808080 "
                         "or rgb(128,128,128))") from None
    if len(rgb) == 4 and rgb[3] != 255:
        raise UsageError(f"--background {value!r} must be opaque (alpha {rgb[3]})")
    return (int(rgb[0]), int(rgb[1]), int(rgb[2]))


def _resample() -> Any:
    from PIL import Image
    return getattr(Image.Resampling, RESAMPLE.upper())


def resize_shorter(image: Any, side: int) -> Any:
    """Resize so the shorter side is `side` (aspect kept, other side rounded; upscales too)."""
    width, height = image.size
    if min(width, height) == side:
        return image
    if width <= height:
        size = (side, max(1, round(height * side / width)))
    else:
        size = (max(1, round(width * side / height)), side)
    return image.resize(size, _resample())


def fit(image: Any, height: int, width: int) -> Any:
    """Resize to cover height x width (aspect kept), center-cropped, in one resampling pass."""
    from PIL import ImageOps
    if image.size == (width, height):
        return image
    return ImageOps.fit(image, (width, height), method=_resample(), centering=(0.5, 0.5))


@dataclass(frozen=True)
class ImageCodec:
    """One image mode with its options; encode() turns a file's bytes into a payload."""

    mode: str = DEFAULT_IMAGE_MODE
    resize: Optional[int] = None                    # jpeg/png/webp: shorter side
    size: Optional[Tuple[int, int]] = None          # raw: (H, W)
    quality: Optional[int] = None                   # jpeg/webp
    background: Tuple[int, int, int] = (255, 255, 255)
    validate: str = DEFAULT_VALIDATE                # passthrough: full | fast | none (codecs/validate.py)
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS  # larger images are refused from their header

    @property
    def background_hex(self) -> str:
        """The background colour as #rrggbb."""
        return "#%02x%02x%02x" % tuple(self.background)

    @property
    def raw_size(self) -> Tuple[int, int]:
        """(H, W) of raw mode; UsageError for a raw codec built without --size."""
        if self.size is None:
            raise UsageError("--image-mode raw needs --size H W")
        return self.size

    def schema(self, labeled: bool) -> SampleSchema:
        """The SampleSchema of datasets written with this codec."""
        if self.mode == "raw":
            return SampleSchema(kind="image", layout=LAYOUT_ARRAY, dtype="uint8", shape=(*self.raw_size, 3),
                                labeled=labeled, codec=self.describe())
        return SampleSchema(kind="image", layout=LAYOUT_BYTES, labeled=labeled, codec=self.describe())

    def describe(self) -> Dict[str, Any]:
        """What the manifest records about this codec (schema.codec); decode reads it back."""
        info: Dict[str, Any] = {"image_mode": self.mode, "background": self.background_hex,
                                "orientation": "exif", "max_image_pixels": self.max_image_pixels}
        if self.mode in REENCODE_MODES:
            name, options = ENCODERS[self.mode]
            info.update({"resize": self.resize, "resample": RESAMPLE, "encoder": name,
                         "encoder_options": dict(options), "metadata": "stripped"})
            if self.mode in LOSSY_MODES:
                info["quality"] = self.quality
        elif self.mode == "passthrough":
            info["validate"] = self.validate
        elif self.mode == "raw":
            info.update({"size": list(self.size or ()), "resample": RESAMPLE, "crop": "center",
                         "channels": "RGB", "layout": "HWC"})
        return info

    def stored_bytes(self, file_sizes: np.ndarray) -> np.ndarray:
        """Estimated stored bytes per item from the source file sizes (exact for raw, before
        compression; re-encoded sizes are estimated as the file size)."""
        if self.mode == "raw" and self.size is not None:
            return np.full(len(file_sizes), self.size[0] * self.size[1] * 3, dtype=np.int64)
        return np.asarray(file_sizes, dtype=np.int64)

    def encode(self, data: bytes) -> Tuple[Payload, str]:
        """(payload to store, detected source format) for one file's bytes, or SampleError."""
        if self.mode == "passthrough" and self.validate != DEFAULT_VALIDATE:
            return data, self._check_without_decoding(data)
        if self.mode == "passthrough":
            image = decode_image(data, draft=True, max_pixels=self.max_image_pixels)
            to_rgb(image, self.background)      # proves the colour mode converts at read time
            return data, str(image.format or "unknown")
        image = decode_image(data, min_size=self._draft_size(), max_pixels=self.max_image_pixels)
        detected = str(image.format or "unknown")
        try:
            pixels = to_rgb(apply_orientation(image), self.background)
            if self.mode == "raw":
                array = np.ascontiguousarray(np.asarray(fit(pixels, *self.raw_size), dtype=np.uint8))
                if array.shape != (*self.raw_size, 3):
                    raise SampleError(f"resized to {array.shape}, expected {(*self.raw_size, 3)}")
                return array, detected
            if self.resize is not None:
                pixels = resize_shorter(pixels, self.resize)
        except (MemoryError, OSError, ValueError) as exc:
            raise SampleError(f"cannot convert the pixels ({type(exc).__name__}: {exc})") from None
        return self._save(pixels), detected

    def _check_without_decoding(self, data: bytes) -> str:
        """--validate fast or none: the detected format, or SampleError."""
        if self.validate == "none":
            return sniff(data)
        return check_structure(data, IMAGE_FORMATS, self.max_image_pixels)

    def _draft_size(self) -> Optional[Tuple[int, int]]:
        needed = max(self.size) if self.mode == "raw" and self.size else self.resize
        return None if needed is None else (needed * DRAFT_GAP, needed * DRAFT_GAP)

    def _save(self, pixels: Any) -> bytes:
        name, options = ENCODERS[self.mode]
        if self.mode in LOSSY_MODES:
            options = {**options, "quality": self.quality}
        pixels.info = {}           # nothing from the source (ICC, EXIF, comments) reaches the output
        out = io.BytesIO()
        try:
            pixels.save(out, name, **options)
        except (OSError, ValueError) as exc:
            raise SampleError(f"cannot encode as {name} ({type(exc).__name__}: {exc})") from None
        return out.getvalue()


def make_image_codec(mode: str = DEFAULT_IMAGE_MODE, *, resize: Optional[int] = None,
                     size: Optional[Sequence[int]] = None, quality: Optional[int] = None,
                     background: Any = DEFAULT_BACKGROUND, validate: str = DEFAULT_VALIDATE,
                     max_image_pixels: Optional[int] = None) -> ImageCodec:
    """The codec for --image-mode and its options; UsageError for contradictory options."""
    if mode not in IMAGE_MODES:
        raise UsageError(f"unknown image mode {mode!r}; choose one of {', '.join(IMAGE_MODES)}")
    if mode == "raw":
        if size is None:
            raise UsageError("--image-mode raw needs --size H W (the stored array shape, e.g. --size 224 224)")
        if len(size) != 2 or any(not 1 <= int(v) <= MAX_SIDE for v in size):
            raise UsageError(f"--size must be two sides between 1 and {MAX_SIDE} (height width), "
                             f"not {tuple(size)}")
        size = (int(size[0]), int(size[1]))
    elif size is not None:
        raise UsageError(f"--size applies to --image-mode raw only (use --resize N with jpeg, png or webp), "
                         f"not to {mode}")
    if resize is not None:
        if mode not in REENCODE_MODES:
            raise UsageError(f"--resize applies to --image-mode jpeg, png or webp only, not to {mode}"
                             + (" (raw uses --size H W)" if mode == "raw" else ""))
        if not 1 <= int(resize) <= MAX_SIDE:
            raise UsageError(f"--resize must be between 1 and {MAX_SIDE} pixels, not {resize}")
        resize = int(resize)
    if quality is not None:
        if mode not in LOSSY_MODES:
            raise UsageError(f"--quality applies to --image-mode jpeg or webp only, not to {mode}"
                             + (" (png is lossless)" if mode == "png" else ""))
        if not 1 <= int(quality) <= 100:
            raise UsageError(f"--quality must be between 1 and 100, not {quality}")
        quality = int(quality)
    elif mode in LOSSY_MODES:
        quality = DEFAULT_QUALITY
    pixels = DEFAULT_MAX_IMAGE_PIXELS if max_image_pixels is None else check_max_image_pixels(max_image_pixels)
    return ImageCodec(mode=mode, resize=resize, size=size, quality=quality, background=parse_background(background),
                      validate=check_validate(validate, mode), max_image_pixels=pixels)
