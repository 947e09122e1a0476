"""One pixel limit per dataset (--max-image-pixels, recorded in the manifest), checked from the
image header before any pixel is decoded, at conversion, in verify --deep and at read time,
without touching Pillow's process-wide setting; and 16-bit grey images are converted without
an int64 copy of the whole image."""
from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shardkit
from shardkit.codecs.image import to_rgb
from shardkit.codecs.pillow import DEFAULT_MAX_IMAGE_PIXELS
from shardkit.errors import CorruptSampleError, UsageError
from tests.faults.helpers import run_cli
from tests.security.crafted import one_image_dataset, png_bytes, png_header_only

PILLOW_LIMIT = Image.MAX_IMAGE_PIXELS


@pytest.fixture(autouse=True)
def pillow_setting_untouched():
    """Nothing shardkit does changes Pillow's global limit."""
    yield
    assert Image.MAX_IMAGE_PIXELS == PILLOW_LIMIT


def _tree(root: Path) -> Path:
    (root / "cls").mkdir(parents=True)
    (root / "cls" / "big.png").write_bytes(png_bytes(40))        # 1600 pixels
    (root / "cls" / "small.png").write_bytes(png_bytes(20))      # 400 pixels
    return root


@pytest.mark.parametrize("validate", ["full", "fast"])
def test_convert_refuses_larger_images_and_records_the_limit(tmp_path: Path, validate: str) -> None:
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    result = run_cli("convert", src, dst, "--quiet", "--max-image-pixels", "1000", "--validate", validate)
    assert result.returncode == 0, result.stderr
    skipped = (dst / "skipped.jsonl").read_text()
    assert "big.png" in skipped and "decompression bomb refused" in skipped and "small.png" not in skipped
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["schema"]["codec"]["max_image_pixels"] == 1000
    assert len(shardkit.open_dataset(dst)) == 1


def test_default_limit_is_recorded(tmp_path: Path) -> None:
    dst = one_image_dataset(tmp_path, "pt")
    assert shardkit.open_dataset(dst).manifest.schema.codec["max_image_pixels"] == DEFAULT_MAX_IMAGE_PIXELS


def test_the_limit_replaces_pillows_warning_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With Pillow's limit at 1000 (hard limit 2000), a dataset allowing 1900 pixels converts and
    reads a 1600-pixel image; Pillow's setting is what it was."""
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    src, dst = _tree(tmp_path / "src"), tmp_path / "dst"
    report = shardkit.convert(str(src), str(dst), format="hdf5", max_image_pixels=1900)
    assert report.skipped == 0
    sizes = sorted(image.size for image, _ in shardkit.open_dataset(dst))
    assert sizes == [(20, 20), (40, 40)]
    assert shardkit.verify(str(dst), mode="deep").ok
    assert Image.MAX_IMAGE_PIXELS == 1000
    with pytest.raises(UsageError, match="Pillow's hard limit"):
        shardkit.convert(str(src), str(tmp_path / "other"), max_image_pixels=2001)


@pytest.mark.parametrize("value", ["0", "-5", "x"])
def test_bad_values_are_usage_errors(tmp_path: Path, value: str) -> None:
    result = run_cli("convert", _tree(tmp_path / "src"), tmp_path / "dst", "--max-image-pixels", value)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "max-image-pixels" in result.stderr
    assert not (tmp_path / "dst" / "manifest.json").exists()


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
def test_readers_and_verify_apply_the_recorded_limit(tmp_path: Path, fmt: str) -> None:
    """A shard of a 1000-pixel dataset made to hold a 1600-pixel image: one CorruptSampleError
    naming shard and sample, and verify --deep finds it (exit 1, one line)."""
    dst = one_image_dataset(tmp_path, fmt, payload=png_bytes(40), max_image_pixels=1000)
    with pytest.raises(CorruptSampleError, match="decompression bomb refused.*1600 pixels") as caught:
        shardkit.open_dataset(dst)[0]
    assert caught.value.shard == f"shards/shard-00000.{ {'hdf5': 'h5'}.get(fmt, fmt) }".replace(" ", "")
    assert caught.value.index == 0 and "\n" not in str(caught.value)
    result = run_cli("verify", dst, "--deep")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "decompression bomb refused" in line]
    assert len(lines) == 1 and "sample 0" in lines[0]


@pytest.mark.parametrize("limit, problem", [(10 ** 6, "decompression bomb refused .2000 x 1000"),
                                            (10 ** 7, "image does not decode")])
def test_the_header_is_checked_before_decoding(tmp_path: Path, limit: int, problem: str) -> None:
    """A header claiming 2000 x 1000 pixels over pixel data that is not zlib: under a lower
    limit it is refused for its size, so the data is never decoded (under a higher one,
    decoding it fails)."""
    payload = png_header_only(2000, 1000, idat=b"not zlib data")
    dst = one_image_dataset(tmp_path, "pt", payload=payload, max_image_pixels=limit)
    with pytest.raises(CorruptSampleError, match=problem):
        shardkit.open_dataset(dst)[0]


@pytest.mark.parametrize("side", [9500, 100_000])
def test_bombs_past_the_default_and_past_pillows_hard_limit(tmp_path: Path, side: int) -> None:
    """Headers of 90 million (over the default, under Pillow's hard limit) and 10 billion pixels."""
    dst = one_image_dataset(tmp_path, "hdf5", payload=png_header_only(side, side))
    with pytest.raises(CorruptSampleError, match="decompression bomb refused"):
        shardkit.open_dataset(dst, decode="numpy")[0]
    problems = shardkit.verify(str(dst), mode="deep").problems
    assert [problem.kind for problem in problems] == ["sample"]
    assert "decompression bomb refused" in problems[0].message


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


def test_png_header_only_is_a_real_png_header() -> None:
    """The crafted file is what it claims: Pillow reads its size from the header."""
    with Image.open(io.BytesIO(png_header_only(30, 20))) as image:
        assert image.size == (30, 20) and image.format == "PNG"
