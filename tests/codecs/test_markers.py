"""--validate fast's own JPEG and PNG walks (codecs/markers.py) on real Pillow-encoded files."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from shardkit.codecs.pillow import IMAGE_FORMATS
from shardkit.codecs.markers import walk_jpeg, walk_png
from shardkit.codecs.validate import check_structure
from shardkit.errors import SampleError

LIMIT = 10_000_000


def _encode(fmt: str, size=(37, 23), **options) -> bytes:
    pixels = np.random.default_rng(3).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, fmt, **options)
    return out.getvalue()


@pytest.mark.parametrize("options", [{}, {"progressive": True}, {"quality": 10}])
def test_whole_jpeg_passes_with_its_size(options) -> None:
    assert walk_jpeg(_encode("JPEG", **options), LIMIT) == (37, 23)


@pytest.mark.parametrize("mode", ["RGB", "L", "P", "RGBA"])
def test_whole_png_passes_with_its_size(mode: str) -> None:
    out = io.BytesIO()
    Image.open(io.BytesIO(_encode("PNG"))).convert(mode).save(out, "PNG")
    assert walk_png(out.getvalue(), LIMIT) == (37, 23)


def test_every_jpeg_cut_before_its_end_marker_is_refused() -> None:
    data = _encode("JPEG")
    for cut in range(3, len(data) - 1):
        with pytest.raises(SampleError, match="JPEG"):
            walk_jpeg(data[:cut], LIMIT)


def test_every_png_cut_before_the_iend_name_is_refused() -> None:
    data = _encode("PNG")
    assert data.endswith(b"IEND\xaeB`\x82")
    for cut in range(9, len(data) - 4):
        with pytest.raises(SampleError, match="PNG"):
            walk_png(data[:cut], LIMIT)


def test_every_bit_flip_in_a_png_chunk_is_refused() -> None:
    """Every chunk's CRC is checked (IEND's own CRC, which covers no data, excepted)."""
    data = _encode("PNG", size=(5, 4))
    for position in range(8, len(data) - 4):
        flipped = bytearray(data)
        flipped[position] ^= 0x04
        with pytest.raises(SampleError):
            walk_png(bytes(flipped), LIMIT)


def test_jpeg_header_damage_is_refused() -> None:
    data = _encode("JPEG")
    sos = data.index(b"\xff\xda")
    frame = data.index(b"\xff\xc0")
    no_frame = data[:frame] + data[frame + 2 + int.from_bytes(data[frame + 2:frame + 4], "big"):]
    with pytest.raises(SampleError, match="before any start-of-frame"):
        walk_jpeg(no_frame, LIMIT)
    with pytest.raises(SampleError, match="not a marker"):
        walk_jpeg(data[:sos] + b"\xff\x12" + data[sos:], LIMIT)
    zero_width = bytearray(data)
    zero_width[frame + 7:frame + 9] = b"\x00\x00"
    with pytest.raises(SampleError, match="0 x 23"):
        walk_jpeg(bytes(zero_width), LIMIT)
    with pytest.raises(SampleError, match="end-of-image"):
        walk_jpeg(data[:-2] + b"\x00\x00", LIMIT)


@pytest.mark.parametrize("fmt, walk", [("JPEG", walk_jpeg), ("PNG", walk_png)])
def test_more_pixels_than_the_limit_is_a_bomb(fmt: str, walk) -> None:
    data = _encode(fmt)
    assert walk(data, 37 * 23) == (37, 23)
    with pytest.raises(SampleError, match="decompression bomb refused .37 x 23 = 851 pixels"):
        walk(data, 37 * 23 - 1)


def test_check_structure_walks_jpeg_and_png_and_opens_the_rest_with_pillow() -> None:
    assert check_structure(_encode("JPEG"), IMAGE_FORMATS, LIMIT) == "JPEG"
    assert check_structure(_encode("PNG"), IMAGE_FORMATS, LIMIT) == "PNG"
    assert check_structure(_encode("GIF"), IMAGE_FORMATS, LIMIT) == "GIF"
    with pytest.raises(SampleError, match="not an image Pillow can identify"):
        check_structure(_encode("GIF")[:40], IMAGE_FORMATS, LIMIT)
    with pytest.raises(SampleError, match="not an image Pillow can identify"):     # PNG not allowed here
        check_structure(_encode("PNG"), ("GIF",), LIMIT)
