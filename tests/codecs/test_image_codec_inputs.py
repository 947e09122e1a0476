"""ImageCodec.encode on every awkward input: colour modes, bit depths, EXIF, animations, bombs."""
from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from PIL import Image

from shardkit.codecs.decode import make_image_decoder
from shardkit.codecs.image import IMAGE_MODES, make_image_codec
from shardkit.errors import SampleError

from .image_cases import ascii_orientation_exif, encode, exif_with_orientation, odd_files, psnr, smooth_rgb

FILES = odd_files()
GOOD = sorted(rel for rel in FILES if rel.startswith("ok/"))


def codec_for(mode: str, **options: object):
    if mode == "raw" and "size" not in options:
        options["size"] = (16, 20)
    return make_image_codec(mode, **options)


def pixels(mode: str, payload: object) -> np.ndarray:
    """The RGB pixels a payload of this mode stands for."""
    if mode == "raw":
        return np.asarray(payload)
    return np.asarray(make_image_decoder()(payload))


@pytest.mark.parametrize("mode", IMAGE_MODES)
@pytest.mark.parametrize("rel", GOOD)
@pytest.mark.filterwarnings("ignore:Corrupt EXIF")      # from the reference Image.open below only
def test_every_good_input_gives_rgb_in_every_mode(mode: str, rel: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")                   # odd metadata must not spam a conversion
        payload, detected = codec_for(mode).encode(FILES[rel])
        array = pixels(mode, payload)
    assert array.dtype == np.uint8 and array.ndim == 3 and array.shape[2] == 3
    assert detected == Image.open(io.BytesIO(FILES[rel])).format
    if mode == "raw":
        assert array.shape == (16, 20, 3)
    if mode == "passthrough":
        assert payload == FILES[rel]


@pytest.mark.parametrize("mode", IMAGE_MODES)
@pytest.mark.parametrize("rel,reason", [("bad/bomb.png", "decompression bomb"),
                                        ("bad/not-an-image.jpg", "not an image")])
def test_bombs_and_non_images_are_refused_in_every_mode(mode: str, rel: str, reason: str) -> None:
    with pytest.raises(SampleError, match=reason):
        codec_for(mode).encode(FILES[rel])


def test_empty_file_is_refused() -> None:
    with pytest.raises(SampleError, match="empty file"):
        codec_for("jpeg").encode(b"")


def full(rel: str, mode: str = "png", **options: object) -> np.ndarray:
    """Lossless RGB pixels after the codec's colour handling (png mode keeps them exactly)."""
    payload, _ = codec_for(mode, **options).encode(FILES[rel])
    return pixels(mode, payload)


def test_cmyk_becomes_rgb() -> None:
    array = full("ok/cmyk.jpg")
    assert np.all(np.abs(array.astype(int) - [255, 0, 0]) <= 2)


def test_palette_transparency_is_composited_on_the_background() -> None:
    white = full("ok/palette-transparent.png")
    red = full("ok/palette-transparent.png", background="red")
    assert np.all(white[:, :20] == [0, 255, 0]) and np.all(red[:, :20] == [0, 255, 0])
    assert np.all(white[:, 20:] == [255, 255, 255])          # index 0 is transparent
    assert np.all(red[:, 20:] == [255, 0, 0])


def test_alpha_is_blended_over_the_background() -> None:
    array = full("ok/rgba-half.png", background="#000000")
    assert np.all(array[:, 20:] == [200, 0, 0])                # opaque
    assert np.all(np.abs(array[:, :20].astype(int) - [100, 0, 0]) <= 1)   # alpha 128 over black
    gray = full("ok/la.png", background="#000000")
    assert np.all(gray[:, 20:] == [200, 200, 200])
    assert np.all(np.abs(gray[:, :20].astype(int) - 100) <= 1)


@pytest.mark.parametrize("rel", ["ok/gray16.png", "ok/gray16.tif", "ok/gray32.ppm"])
def test_wide_grayscale_is_scaled_to_8_bits(rel: str) -> None:
    array = full(rel)
    wide = np.asarray(Image.open(io.BytesIO(FILES[rel]))).astype(np.int64)
    expected = (wide * 255 + 32767) // 65535
    assert array[0, 0].tolist() == [255, 255, 255] and array[0, 1].tolist() == [128, 128, 128]
    assert np.array_equal(array[..., 0], expected) and np.array_equal(array[..., 2], expected)


def test_bilevel_and_grayscale_become_gray_rgb() -> None:
    bilevel = full("ok/bilevel.png")
    assert set(np.unique(bilevel).tolist()) <= {0, 255}
    gray = full("ok/gray.jpg")
    assert np.array_equal(gray[..., 0], gray[..., 1]) and np.array_equal(gray[..., 1], gray[..., 2])


@pytest.mark.parametrize("rel", ["ok/animated.gif", "ok/animated.webp"])
def test_animations_keep_their_first_frame(rel: str) -> None:
    assert np.all(full(rel) == [255, 0, 0])
    assert np.all(full(rel, mode="raw") == [255, 0, 0])


def test_exif_orientation_is_applied() -> None:
    stored = np.asarray(Image.open(io.BytesIO(FILES["ok/exif-rotate-6.jpg"])).convert("RGB"))
    upright = np.rot90(stored, k=-1)          # orientation 6: rotate 90 degrees clockwise
    array = full("ok/exif-rotate-6.jpg")
    assert array.shape == (40, 24, 3) and np.array_equal(array, upright)
    raw = full("ok/exif-rotate-6.jpg", mode="raw", size=(40, 24))
    assert np.array_equal(raw, upright)


@pytest.mark.parametrize("rel", ["ok/exif-orientation-9.jpg", "ok/exif-garbage.jpg"])
@pytest.mark.filterwarnings("ignore:Corrupt EXIF")
def test_odd_exif_leaves_the_image_as_stored(rel: str) -> None:
    stored = np.asarray(Image.open(io.BytesIO(FILES[rel])).convert("RGB"))
    assert np.array_equal(full(rel), stored)


@pytest.mark.parametrize("exif", [exif_with_orientation(0), exif_with_orientation(1), exif_with_orientation(65535),
                                  ascii_orientation_exif(b"6\0"), b"Exif\x00\x00MM\x00*garbage"])
def test_orientation_values_outside_2_to_8_are_ignored(exif: bytes) -> None:
    data = encode(Image.fromarray(smooth_rgb(30, 20)), "PNG", exif=exif)
    assert full_from(data).shape == (20, 30, 3)


def full_from(data: bytes) -> np.ndarray:
    payload, _ = codec_for("png").encode(data)
    return pixels("png", payload)


@pytest.mark.parametrize("mode", ["jpeg", "png", "webp"])
def test_reencoded_output_is_deterministic_and_carries_no_metadata(mode: str) -> None:
    codec = codec_for(mode, resize=20)
    first, _ = codec.encode(FILES["ok/icc.jpg"])
    second, _ = codec.encode(FILES["ok/icc.jpg"])
    assert first == second
    image = Image.open(io.BytesIO(first))
    assert image.format == mode.upper()
    assert not {"exif", "icc_profile", "comment", "xmp", "dpi"} & set(image.info)
    assert b"Exif" not in first and b"hello" not in first


def test_raw_is_deterministic_and_contiguous() -> None:
    codec = codec_for("raw", size=(24, 24))
    first, _ = codec.encode(FILES["ok/rgb.jpg"])
    second, _ = codec.encode(FILES["ok/rgb.jpg"])
    assert first.flags.c_contiguous and first.dtype == np.uint8
    assert np.array_equal(first, second)


@pytest.mark.parametrize("resize,expected", [(16, (24, 16)), (64, (96, 64)), (32, (48, 32))])
def test_resize_sets_the_shorter_side_and_keeps_aspect(resize: int, expected: tuple) -> None:
    payload, _ = codec_for("png", resize=resize).encode(FILES["ok/rgb.png"])   # 48 x 32 source
    assert Image.open(io.BytesIO(payload)).size == expected


def test_raw_resizes_to_cover_and_crops_the_center() -> None:
    # Left third red, middle green, right third blue; a square crop of a 3:1 image keeps the middle.
    stripes = np.zeros((20, 60, 3), dtype=np.uint8)
    stripes[:, :20, 0] = stripes[:, 20:40, 1] = stripes[:, 40:, 2] = 255
    array, _ = codec_for("raw", size=(10, 10)).encode(encode(Image.fromarray(stripes), "PNG"))
    assert array.shape == (10, 10, 3)
    assert np.all(np.abs(array[:, 2:8].astype(int) - [0, 255, 0]) <= 3)
    same, _ = codec_for("raw", size=(20, 60)).encode(encode(Image.fromarray(stripes), "PNG"))
    assert np.array_equal(same, stripes)           # no resampling when the size already fits


@pytest.mark.parametrize("mode", ["jpeg", "webp"])
def test_lossy_modes_stay_within_the_codecs_loss(mode: str) -> None:
    source = smooth_rgb(96, 64, seed=5)
    data = encode(Image.fromarray(source), "PNG")
    payload, _ = codec_for(mode, quality=90).encode(data)
    direct = np.asarray(Image.open(io.BytesIO(encode(Image.fromarray(source), mode.upper(), quality=90))))
    codec_loss = psnr(direct, source)             # the encoder's own loss at this quality
    assert psnr(pixels(mode, payload), source) >= min(codec_loss - 0.5, 33.0)
    assert codec_loss > 30.0
    coarse, _ = codec_for(mode, quality=10).encode(data)
    assert len(coarse) < len(payload)          # --quality reaches the encoder


def test_lossy_draft_decode_does_not_cost_quality() -> None:
    # A large JPEG resized to a small side may be decoded at a reduced DCT scale; compare with
    # a full decode resized by the same filter.
    source = Image.fromarray(smooth_rgb(640, 480, seed=7))
    data = encode(source, "JPEG", quality=95)
    small, _ = codec_for("png", resize=60).encode(data)
    reference = Image.open(io.BytesIO(data)).convert("RGB").resize((80, 60), Image.Resampling.LANCZOS)
    assert psnr(pixels("png", small), np.asarray(reference)) >= 38.0


def test_32bit_grayscale_outside_16_bits_is_clipped() -> None:
    values = np.array([[-5, 70000, 0x8080, 65535]], dtype=np.int32)
    data = encode(Image.fromarray(values, mode="I"), "TIFF")
    assert Image.open(io.BytesIO(data)).mode == "I"
    assert full_from(data)[0, :, 0].tolist() == [0, 255, 128, 255]


def test_pixels_too_large_to_convert_are_a_sample_error() -> None:
    # A 1 x 16384 strip upscaled to a shorter side of 16384 needs 16384 x 268M pixels.
    strip = encode(Image.new("RGB", (16384, 1)), "PNG")
    with pytest.raises(SampleError):
        codec_for("png", resize=16384).encode(strip)
