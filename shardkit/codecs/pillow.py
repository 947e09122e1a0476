"""Opening untrusted images with Pillow: only the allowed formats (never a plugin that runs another
program), their file extensions, the pixel limit read from the header before any pixel is
decoded, and a decode of every byte. The image codecs, validation and read-time decoding all open
images through here."""
from __future__ import annotations

import contextlib
import functools
import io
import warnings
from typing import Any, Callable, FrozenSet, Iterator, Optional, Sequence, Tuple

from ..errors import SampleError, UsageError

#: The only Pillow formats shardkit opens (plugin ids of Image.open(..., formats=...)): decoders
#: built into Pillow and its bundled libraries. Left out on purpose: EPS/PS (decoded by running
#: Ghostscript, an external program), the identify-only stubs (BUFR, GRIB, HDF5, MPEG, WMF) and
#: rarely used formats whose parsers add attack surface (docs/image-modes.md).
IMAGE_FORMATS: Tuple[str, ...] = ("AVIF", "BMP", "DIB", "GIF", "ICO", "JPEG", "JPEG2000", "PNG", "PPM",
                                  "QOI", "TGA", "TIFF", "WEBP")
#: Formats Pillow reports for files its allowed plugins open (a JPEG with extra pictures is "MPO").
_REPORTED_AS = {"MPO": "JPEG"}
#: The Pillow plugin module of each allowed format: only these are imported (Image.init() would
#: import every plugin Pillow has, which costs each worker process more than it saves).
_PLUGINS = {"AVIF": "Avif", "BMP": "Bmp", "DIB": "Bmp", "GIF": "Gif", "ICO": "Ico", "JPEG": "Jpeg",
            "JPEG2000": "Jpeg2K", "PNG": "Png", "PPM": "Ppm", "QOI": "Qoi", "TGA": "Tga", "TIFF": "Tiff",
            "WEBP": "WebP"}
#: File extensions (lower case) that Pillow registers for the allowed formats and for MPO: the files
#: an image tree's scan takes as images. Fixed here so that a scan imports no Pillow plugin;
#: tests/security/test_image_allow_list.py checks it against the installed Pillow.
IMAGE_EXTENSIONS: FrozenSet[str] = frozenset({
    ".apng", ".avif", ".avifs", ".bmp", ".dib", ".gif", ".icb", ".ico", ".j2c", ".j2k", ".jfif", ".jp2", ".jpc",
    ".jpe", ".jpeg", ".jpf", ".jpg", ".jpx", ".mpo", ".pbm", ".pfm", ".pgm", ".png", ".pnm", ".ppm", ".qoi",
    ".tga", ".tif", ".tiff", ".vda", ".vst", ".webp"})
#: Default of --max-image-pixels: Pillow's own default MAX_IMAGE_PIXELS (1 GiB / 4 / 3), so
#: datasets written before the option decode exactly as they did. Recorded in the manifest.
DEFAULT_MAX_IMAGE_PIXELS = 89_478_485


def image_extensions() -> FrozenSet[str]:
    """Lower-case extensions (with dot) of the allowed image formats (IMAGE_EXTENSIONS)."""
    return IMAGE_EXTENSIONS


@functools.lru_cache(maxsize=1)
def _register_plugins() -> None:
    """Import the Pillow plugins of the allowed formats (a plugin missing from an older Pillow is
    left out: Image.open then imports every plugin, as it would anyway)."""
    import importlib
    for name in sorted(set(_PLUGINS.values())):
        try:
            importlib.import_module(f"PIL.{name}ImagePlugin")
        except ImportError:
            pass


def pillow_pixel_ceiling() -> Optional[int]:
    """Pillow's process-wide hard limit (2 x Image.MAX_IMAGE_PIXELS; None when switched off),
    which shardkit never changes: Pillow refuses larger images before any check of ours."""
    from PIL import Image
    return None if Image.MAX_IMAGE_PIXELS is None else 2 * int(Image.MAX_IMAGE_PIXELS)


def check_max_image_pixels(value: Any) -> int:
    """--max-image-pixels as an int, or UsageError (at least 1, at most Pillow's hard limit)."""
    ceiling = pillow_pixel_ceiling()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or (ceiling and value > ceiling):
        raise UsageError(f"--max-image-pixels must be a whole number from 1 to {ceiling or 'any'} "
                         f"(Pillow's hard limit, 2 x PIL.Image.MAX_IMAGE_PIXELS), not {value!r}")
    return value


def open_image(stream: Any, formats: Sequence[str] = IMAGE_FORMATS,
               max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Any:
    """Image.open limited to the allowed formats (never a plugin that runs another program) and
    to images of at most max_pixels, read from the header before any pixel is decoded;
    SampleError for a larger one. Pillow's global limit is left as it is."""
    from PIL import Image
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)    # max_pixels is the limit
        return _open_allowed(stream, formats, max_pixels)


def _open_allowed(stream: Any, formats: Sequence[str], max_pixels: int) -> Any:
    """open_image without its warning filter (the caller has one)."""
    from PIL import Image
    _register_plugins()
    try:
        image = Image.open(stream, formats=_allowed(tuple(formats)))
    except Image.DecompressionBombError as exc:
        raise SampleError(f"decompression bomb refused ({exc})") from None
    width, height = image.size
    if width * height > max_pixels:
        raise SampleError(f"decompression bomb refused ({width} x {height} = {width * height} pixels, "
                          f"more than the limit of {max_pixels}, --max-image-pixels)")
    return image


@functools.lru_cache(maxsize=64)
def _allowed(formats: Tuple[str, ...]) -> Tuple[str, ...]:
    """The formats of `formats` that are in IMAGE_FORMATS, in their order."""
    return tuple(name for name in formats if name in IMAGE_FORMATS)


def decode_fully(stream: Any, formats: Sequence[str], max_pixels: int, *,
                 draft_to: Optional[Callable[[Any], Optional[Tuple[int, int]]]] = None) -> Any:
    """open_image, then decode every pixel of the first frame, or raise SampleError whatever
    Pillow raises (damaged data, a format not allowed, too many pixels). draft_to(image) may
    give a JPEG's reduced decode size."""
    with pillow_verdict("image does not decode"), warnings.catch_warnings():
        # Pillow's notes on odd metadata (EXIF) and its bomb warning (max_pixels is the limit)
        warnings.simplefilter("ignore")
        image = _open_allowed(stream, formats, max_pixels)
        wanted = draft_to(image) if draft_to is not None and image.format == "JPEG" else None
        if wanted:
            image.draft("RGB", wanted)
        image.load()
    return image


@contextlib.contextmanager
def pillow_verdict(damaged: str) -> Iterator[None]:
    """Whatever Pillow raises on untrusted bytes inside the block, as one SampleError (damaged:
    what to call bytes Pillow fails on in any other way: it raises many types, struct.error too)."""
    from PIL import Image
    try:
        yield
    except SampleError:
        raise
    except Image.DecompressionBombError as exc:
        raise SampleError(f"decompression bomb refused ({exc})") from None
    except Image.UnidentifiedImageError:
        raise SampleError("not an image Pillow can identify in an allowed format "
                          "(docs/image-modes.md)") from None
    except Exception as exc:  # noqa: BLE001 - see the docstring
        raise SampleError(f"{damaged} ({type(exc).__name__}: {exc})") from None


def _eighth(image: Any) -> Tuple[int, int]:
    """The smallest DCT scale of a JPEG: 1/8 of each side."""
    return max(1, image.width // 8), max(1, image.height // 8)


def decode_image(data: bytes, *, draft: bool = False, min_size: Optional[Tuple[int, int]] = None,
                 formats: Sequence[str] = IMAGE_FORMATS, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Any:
    """Decode every byte of an image (its first frame) in one of `formats`, or raise SampleError.

    JPEG only: draft decodes at 1/8 DCT scale (a fast integrity check); min_size lets the
    decoder use the smallest DCT scale that keeps both sides at least min_size.
    An image of more than max_pixels is refused from its header (--max-image-pixels).
    """
    if not data:
        raise SampleError("empty file (0 bytes)")
    if draft:
        return decode_fully(io.BytesIO(data), formats, max_pixels, draft_to=_eighth)
    if min_size is None:
        return decode_fully(io.BytesIO(data), formats, max_pixels)
    return decode_fully(io.BytesIO(data), formats, max_pixels, draft_to=lambda image: min_size)
