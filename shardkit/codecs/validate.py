"""How much of an image file is checked before its bytes are stored unchanged (--validate).

  full  every byte decoded (JPEG in draft mode, at 1/8 DCT scale): a file that is stored
        decodes at read time
  fast  structure only, no pixel decoding: JPEG and PNG are walked in plain Python
        (codecs/markers.py: JPEG marker segments up to the first scan, the frame size, an
        end-of-image marker after the last scan; PNG every chunk's CRC from IHDR to IEND);
        other formats: Pillow parses the header (format, size, mode, the decompression-bomb
        limit) and Image.verify() checks what their plugin checks (GIF, TIFF, WebP, ...)
  none  nothing decoded or parsed: the format is sniffed from the file's first bytes (magic
        numbers below) and a file of no listed format is skipped

The damaged inputs each mode lets through are listed in docs/reliability.md.
"""
from __future__ import annotations

import io
import warnings
from typing import Any, Sequence, Tuple

from ..errors import SampleError, UsageError
from .markers import PNG_SIGNATURE, walk_jpeg, walk_png

VALIDATE_MODES = ("full", "fast", "none")
DEFAULT_VALIDATE = "full"

#: (Pillow format name, offset, magic bytes) recognised by --validate none.
MAGIC: Tuple[Tuple[str, int, bytes], ...] = (
    ("JPEG", 0, b"\xff\xd8\xff"),
    ("PNG", 0, b"\x89PNG\r\n\x1a\n"),
    ("GIF", 0, b"GIF87a"),
    ("GIF", 0, b"GIF89a"),
    ("WEBP", 8, b"WEBP"),          # after RIFF....: checked with the RIFF tag below
    ("BMP", 0, b"BM"),
    ("TIFF", 0, b"II*\x00"),
    ("TIFF", 0, b"MM\x00*"),
)

#: Formats walked by codecs/markers.py instead of Pillow: (signature, Pillow name, walk).
_WALKED = ((b"\xff\xd8\xff", "JPEG", walk_jpeg), (PNG_SIGNATURE, "PNG", walk_png))


def check_validate(mode: str, image_mode: str) -> str:
    """The --validate mode, or UsageError (only passthrough stores bytes it did not decode)."""
    if mode not in VALIDATE_MODES:
        raise UsageError(f"unknown --validate {mode!r}; choose one of {', '.join(VALIDATE_MODES)}")
    if mode != DEFAULT_VALIDATE and image_mode != "passthrough":
        raise UsageError(f"--validate {mode} applies to --image-mode passthrough only; "
                         f"--image-mode {image_mode} decodes every image to re-encode it")
    return mode


def sniff(data: bytes) -> str:
    """The format named by the file's magic bytes, or SampleError (--validate none)."""
    if not data:
        raise SampleError("empty file (0 bytes)")
    for name, offset, magic in MAGIC:
        if data[offset:offset + len(magic)] == magic and (name != "WEBP" or data[:4] == b"RIFF"):
            return name
    raise SampleError("not a known image format (its first bytes match no JPEG, PNG, GIF, WebP, BMP "
                      "or TIFF signature)")


def check_structure(data: bytes, formats: Sequence[str], max_pixels: int) -> str:
    """Header, and end markers or chunk CRCs, without decoding pixels (--validate fast);
    the format name, or SampleError. JPEG and PNG are walked without Pillow (codecs/markers.py);
    other formats are opened by Pillow, only those named in formats. Only images of at most
    max_pixels pass."""
    if not data:
        raise SampleError("empty file (0 bytes)")
    for signature, name, walk in _WALKED:
        if data.startswith(signature) and name in formats:
            walk(data, max_pixels)
            return name
    from .pillow import open_image, pillow_verdict
    with pillow_verdict("image structure is damaged"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        image: Any = open_image(io.BytesIO(data), formats, max_pixels)
        name = str(image.format or "unknown")
        image.verify()
    return name


__all__ = ["DEFAULT_VALIDATE", "MAGIC", "VALIDATE_MODES", "check_structure", "check_validate", "sniff"]
