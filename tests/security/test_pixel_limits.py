"""Decoding at read time is no looser than at conversion: one pixel limit, and 16-bit grey
images are converted without an int64 copy of the whole image."""
from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shardkit
from shardkit.codecs.image import to_rgb
from shardkit.errors import SampleError
from tests.security.crafted import one_image_dataset


def test_read_time_refuses_what_conversion_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An image between Pillow's limit and twice it: conversion refuses it, so must a reader."""
    out = io.BytesIO()
    Image.new("RGB", (40, 40), (9, 9, 9)).save(out, "PNG")
    dst = one_image_dataset(tmp_path, "pt", payload=out.getvalue())
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)       # 1600 pixels: over the limit, under 2x
    with pytest.raises(SampleError, match="decompression bomb refused"):
        shardkit.open_dataset(dst)[0]
    assert not shardkit.verify(str(dst), mode="deep").ok


def test_sixteen_bit_grey_needs_no_int64_copy() -> None:
    side = 3000
    wide = (np.arange(side * side, dtype=np.uint32) % 65536).astype(np.uint16).reshape(side, side)
    image = Image.fromarray(wide)
    assert image.mode.startswith("I;16")
    tracemalloc.start()
    try:
        rgb = to_rgb(image)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    expected = ((wide.astype(np.int64) * 255 + 32767) // 65535).astype(np.uint8)
    assert np.array_equal(np.asarray(rgb)[..., 0], expected)
    # np.asarray costs 4 bytes a pixel (Pillow's tobytes() and the array); the old int64 path 12+.
    assert peak < 5 * side * side, f"{peak} bytes of numpy temporaries for {side * side} pixels"
