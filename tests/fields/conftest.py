"""Samples of named fields for the tests: small images and values whose expected reads come from
the inputs themselves (the bytes given, Pillow's pixels, the numbers written)."""
from __future__ import annotations

import io
from typing import Any, Dict, List

import numpy as np
import pytest

#: A schema that uses every field type, optional ones and a variable-shape array.
ALL_FIELDS: Dict[str, Any] = {
    "image": "image",
    "caption": "text",
    "label": {"type": "label", "classes": ["cat", "dog", "emu"]},
    "count": "int",
    "score": "float",
    "blob": {"type": "bytes", "optional": True},
    "meta": "json",
    "embedding": {"type": "array", "dtype": "float32", "shape": [4]},
    "boxes": {"type": "array", "dtype": "float32", "shape": [None, 4], "optional": True},
}


def png_bytes(seed: int, size: tuple = (9, 7)) -> bytes:
    """A small PNG of seeded random pixels."""
    from PIL import Image
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def make_samples(count: int, seed: int = 0) -> List[Dict[str, Any]]:
    """`count` samples of ALL_FIELDS: every third lacks its optional blob, every fifth its boxes,
    and some have zero boxes."""
    rng = np.random.default_rng(seed)
    samples = []
    for number in range(count):
        sample: Dict[str, Any] = {
            "image": png_bytes(seed * 100_000 + number),
            "caption": f"sample {number}: «{'é' * (number % 4)}»",
            "label": ("cat", "dog", "emu")[number % 3],
            "count": int(rng.integers(-10**12, 10**12)),
            "score": float(rng.random()),
            "meta": {"n": number, "tags": ["a"] * (number % 3), "nested": {"x": None}},
            "embedding": rng.random(4).astype(np.float32),
        }
        if number % 3:
            sample["blob"] = bytes(rng.integers(0, 256, size=number % 7, dtype=np.uint8))
        if number % 5:
            sample["boxes"] = rng.random((number % 4, 4)).astype(np.float32)
        samples.append(sample)
    return samples


@pytest.fixture
def source_date(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed creation time, so that two runs agree byte for byte."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
