"""JPEG and PNG structure walks in plain Python (--validate fast): no Pillow plugin, no pixel.

Pillow's Python header parsers cost more than reading a small file, so `fast` walks the two
common formats itself and checks:

  JPEG  SOI `FF D8`; every marker segment up to the first start-of-scan (SOS `FF DA`) is
        complete (its length fits in the file); a start-of-frame (SOFn) comes before SOS,
        with a non-zero width and height and 1, 3 or 4 components; width x height is at
        most the pixel limit; an end-of-image marker `FF D9` follows the last SOS
        (entropy-coded data escapes 0xFF, so a truncated scan has none)
  PNG   the 8-byte signature; a chain of complete chunks, each with a correct CRC-32, from
        IHDR (13 bytes: non-zero width and height, a valid colour type and bit depth,
        compression, filter and interlace methods) to the IEND chunk's name, with at least
        one IDAT before it (IEND holds no data; its CRC is not needed, as Pillow does not
        read it); width x height is at most the pixel limit

Each walk returns the image's (width, height), or raises SampleError saying what is wrong.
"""
from __future__ import annotations

import struct
import zlib
from typing import Tuple

from ..errors import SampleError

JPEG_SIGNATURE = b"\xff\xd8"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
#: Start-of-frame markers (every SOFn but DHT C4, JPG C8 and DAC CC).
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
#: Markers without a length field: TEM and the restart markers RST0-7.
_STANDALONE = frozenset({0x01, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4, 0xD5, 0xD6, 0xD7})
_EOI, _SOS = b"\xff\xd9", b"\xff\xda"
#: PNG colour type -> the bit depths it allows.
_PNG_DEPTHS = {0: (1, 2, 4, 8, 16), 2: (8, 16), 3: (1, 2, 4, 8), 4: (8, 16), 6: (8, 16)}
_CHUNK = struct.Struct(">I4s")


def _check_pixels(width: int, height: int, max_pixels: int) -> Tuple[int, int]:
    if width * height > max_pixels:
        raise SampleError(f"decompression bomb refused ({width} x {height} = {width * height} pixels, "
                          f"more than the limit of {max_pixels}, --max-image-pixels)")
    return width, height


def walk_jpeg(data: bytes, max_pixels: int) -> Tuple[int, int]:
    """(width, height) of a structurally whole JPEG (see the module docstring), or SampleError."""
    end = len(data)
    position = 2
    size = None
    while True:
        while position < end and data[position] == 0xFF:       # fill bytes before a marker
            position += 1
        if position >= end or data[position - 1] != 0xFF:
            raise SampleError("damaged JPEG (header ends or breaks before its first scan)")
        marker = data[position]
        position += 1
        if marker in _STANDALONE:
            continue
        if marker < 0xC0:
            raise SampleError(f"damaged JPEG (FF {marker:02X} is not a marker)")
        if position + 2 > end:
            raise SampleError("truncated JPEG (header ends inside a marker segment)")
        length = (data[position] << 8) | data[position + 1]
        if length < 2 or position + length > end:
            raise SampleError(f"damaged JPEG (marker FF {marker:02X} segment of {length} bytes does not fit)")
        if marker in _SOF:
            if length < 8:
                raise SampleError("damaged JPEG (start-of-frame segment too short)")
            height = (data[position + 3] << 8) | data[position + 4]
            width = (data[position + 5] << 8) | data[position + 6]
            components = data[position + 7]
            if not width or not height or components not in (1, 3, 4):
                raise SampleError(f"damaged JPEG (frame of {width} x {height} pixels, {components} components)")
            size = _check_pixels(width, height, max_pixels)
        elif marker == 0xDA:
            if size is None:
                raise SampleError("damaged JPEG (scan before any start-of-frame marker)")
            break
        elif marker in (0xD8, 0xD9):
            raise SampleError(f"damaged JPEG (marker FF {marker:02X} inside the header)")
        position += length
    if data.rfind(_EOI) < data.rfind(_SOS):
        raise SampleError("truncated JPEG (no end-of-image marker after its last scan)")
    return size


def walk_png(data: bytes, max_pixels: int) -> Tuple[int, int]:
    """(width, height) of a structurally whole PNG (see the module docstring), or SampleError."""
    end = len(data)
    position = len(PNG_SIGNATURE)
    size = None
    idat = False
    crc32 = zlib.crc32
    while True:
        if position + 8 > end:
            raise SampleError("truncated PNG (no IEND end chunk)")
        length, kind = _CHUNK.unpack_from(data, position)
        if kind == b"IEND" and length == 0 and size is not None:    # its CRC covers no data; Pillow skips it
            if not idat:
                raise SampleError("damaged PNG (no IDAT image data before IEND)")
            return size
        body = position + 8
        after = body + length + 4
        if after > end:
            raise SampleError(f"truncated PNG (chunk {kind!r} of {length} bytes does not fit)")
        if crc32(data[position + 4:body + length]) != int.from_bytes(data[body + length:after], "big"):
            raise SampleError(f"damaged PNG (CRC mismatch in chunk {kind!r})")
        if size is None:
            if kind != b"IHDR" or length != 13:
                raise SampleError("damaged PNG (does not start with a 13-byte IHDR chunk)")
            width, height, depth, colour, compression, filtering, interlace = \
                struct.unpack_from(">IIBBBBB", data, body)
            if not width or not height or depth not in _PNG_DEPTHS.get(colour, ()) \
                    or compression or filtering or interlace > 1:
                raise SampleError(f"damaged PNG (IHDR: {width} x {height}, colour type {colour}, "
                                  f"bit depth {depth})")
            size = _check_pixels(width, height, max_pixels)
        elif kind == b"IDAT":
            idat = True
        position = after


__all__ = ["JPEG_SIGNATURE", "PNG_SIGNATURE", "walk_jpeg", "walk_png"]
