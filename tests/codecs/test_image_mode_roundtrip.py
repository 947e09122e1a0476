"""Every image mode round-trips through every format: convert -> read back -> compare.

raw: the exact pixels; png: the exact pixels; jpeg / webp: within the codec's loss (PSNR);
passthrough: the exact file bytes. Readers take no image flags: the manifest says it all.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest
from PIL import Image

import shardkit
from shardkit.codecs.image import make_image_codec
from shardkit.errors import UsageError

from .image_cases import REFUSED, encode, psnr, smooth_rgb

MODE_OPTIONS: Dict[str, Dict[str, Any]] = {
    "passthrough": {},
    "jpeg": {"resize": 24, "quality": 90},
    "png": {"resize": 24},
    "webp": {"resize": 24, "quality": 90},
    "raw": {"size": (20, 28)},
}


def ordered_images(root: Path) -> List[str]:
    """Relative paths of the files below root in shardkit's order (path components sorted)."""
    rels = [p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()]
    return sorted(rels, key=lambda rel: tuple(rel.split("/")))


def convert(src: Path, dst: Path, fmt: str, mode: str, **extra: Any) -> Path:
    """Convert in source order: the tests below compare sample i with the i-th sorted file."""
    options = {"order": "source", **MODE_OPTIONS[mode], **extra}
    shardkit.convert(str(src), str(dst), format=fmt, image_mode=mode, samples_per_shard=5, quiet=True, **options)
    return dst


def codec(mode: str, **extra: Any) -> Any:
    options = {key: value for key, value in {**MODE_OPTIONS[mode], **extra}.items()
               if key in ("resize", "size", "quality", "background")}
    return make_image_codec(mode, **options)


@pytest.fixture(scope="session")
def smooth_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten noise-free pictures (JPEG q95 and PNG sources) in two classes."""
    root = tmp_path_factory.mktemp("smooth") / "images"
    for number in range(10):
        folder = root / f"class{number % 2}"
        folder.mkdir(parents=True, exist_ok=True)
        image = Image.fromarray(smooth_rgb(64 + 4 * number, 48, seed=number))
        if number % 2:
            (folder / f"{number:02d}.png").write_bytes(encode(image, "PNG"))
        else:
            (folder / f"{number:02d}.jpg").write_bytes(encode(image, "JPEG", quality=95))
    return root


@pytest.mark.parametrize("mode", sorted(MODE_OPTIONS))
def test_stored_payloads_are_exactly_what_the_codec_made(odd_tree: Path, tmp_path: Path, fmt: str,
                                                         mode: str) -> None:
    dst = convert(odd_tree, tmp_path / "ds", fmt, mode)
    good = [rel for rel in ordered_images(odd_tree) if rel not in REFUSED]
    ds = shardkit.open_dataset(dst, decode=None)
    assert len(ds) == len(good) and ds.classes == ["bad", "ok"]
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["schema"]["codec"] == codec(mode).describe()
    skipped = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    assert {line["path"]: line["reason"] for line in skipped}.keys() == REFUSED.keys()
    for line in skipped:
        assert REFUSED[line["path"]] in line["reason"]
    reference = codec(mode)
    for index, rel in enumerate(good):
        payload, label = ds[index]
        expected, _ = reference.encode((odd_tree / rel).read_bytes())
        assert label == 1
        if mode == "raw":
            assert isinstance(payload, np.ndarray) and payload.dtype == np.uint8
            assert payload.shape == (20, 28, 3) and np.array_equal(payload, expected), rel
        else:
            assert bytes(payload) == expected, rel
    assert shardkit.verify(str(dst), mode="deep").ok


def pillow_pixels(data: bytes, mode: str) -> np.ndarray:
    """The pixels docs/image-modes.md promises, computed with Pillow alone (an oracle independent
    of shardkit's codec): RGB, then raw's cover-and-center-crop or the other modes' shorter side
    to --resize, with Lanczos."""
    from PIL import ImageOps
    image = Image.open(io.BytesIO(data)).convert("RGB")
    if mode == "raw":
        height, width = MODE_OPTIONS["raw"]["size"]
        return np.asarray(ImageOps.fit(image, (width, height), method=Image.Resampling.LANCZOS, centering=(0.5, 0.5)))
    side = MODE_OPTIONS[mode]["resize"]
    width, height = image.size
    size = (side, round(height * side / width)) if width <= height else (round(width * side / height), side)
    return np.asarray(image.resize(size, Image.Resampling.LANCZOS))


@pytest.mark.parametrize("mode", sorted(MODE_OPTIONS))
def test_decoded_pixels_match_the_source(smooth_tree: Path, tmp_path: Path, fmt: str, mode: str) -> None:
    dst = convert(smooth_tree, tmp_path / "ds", fmt, mode)
    ds = shardkit.open_dataset(dst, decode="numpy")
    files = ordered_images(smooth_tree)
    assert len(ds) == len(files)
    for index, rel in enumerate(files):
        array, label = ds[index]
        assert label == int(rel.split("/")[0][-1])
        data = (smooth_tree / rel).read_bytes()
        if mode == "passthrough":
            expected = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
            assert np.array_equal(array, expected)
            continue
        expected = pillow_pixels(data, mode)
        assert array.shape == expected.shape and array.dtype == np.uint8
        if mode in ("raw", "png"):
            assert np.array_equal(array, expected), rel
        else:
            # Within the codec's loss: as close as the encoder itself gets at this quality.
            direct = np.asarray(Image.open(io.BytesIO(encode(Image.fromarray(expected), mode.upper(),
                                                             quality=90))).convert("RGB"))
            assert psnr(array, expected) >= min(psnr(direct, expected) - 0.1, 40.0), rel
            assert psnr(array, expected) >= 25.0, rel
        assert min(array.shape[:2]) == (20 if mode == "raw" else 24)


@pytest.mark.parametrize("compression,level", [("none", None), ("gzip", None), ("gzip", 9), ("lzf", None)])
def test_raw_compression_round_trips_exactly(odd_tree: Path, tmp_path: Path, fmt: str, compression: str,
                                             level: Any) -> None:
    plain = convert(odd_tree, tmp_path / "plain", fmt, "raw")
    try:
        packed = convert(odd_tree, tmp_path / "packed", fmt, "raw", compression=compression,
                         compression_level=level)
    except UsageError as exc:                 # only lzf outside HDF5 is refused, with a clear message
        assert (compression, fmt) in {("lzf", "lmdb"), ("lzf", "pt")}, f"{fmt} wrongly refuses {compression}"
        assert compression in str(exc)
        assert not (tmp_path / "packed" / "manifest.json").exists()
        return
    manifest = json.loads((packed / "manifest.json").read_text())
    assert manifest["schema"]["compression"] == compression
    assert manifest["schema"]["compression_level"] == level
    a = shardkit.open_dataset(plain, decode="numpy")
    b = shardkit.open_dataset(packed, decode="numpy", verify_checksums=True)
    for index in range(len(a)):
        assert np.array_equal(a[index][0], b[index][0])
    if compression != "none":        # these pictures are flat: any compressor must shrink them
        assert sum(e["size"] for e in manifest["shards"]) < sum(
            e["size"] for e in json.loads((plain / "manifest.json").read_text())["shards"])


@pytest.mark.parametrize("mode,extra", [("jpeg", {}), ("webp", {}), ("raw", {"compression": "gzip"})])
def test_conversion_is_byte_identical_on_rerun(smooth_tree: Path, tmp_path: Path, fmt: str, mode: str,
                                               extra: dict) -> None:
    first = json.loads((convert(smooth_tree, tmp_path / "a", fmt, mode, **extra) / "manifest.json").read_text())
    second = json.loads((convert(smooth_tree, tmp_path / "b", fmt, mode, **extra, workers=2)
                         / "manifest.json").read_text())
    assert [s["sha256"] for s in first["shards"]] == [s["sha256"] for s in second["shards"]]


def test_raw_reads_in_every_form(smooth_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = convert(smooth_tree, tmp_path / "ds", fmt, "raw")
    stored = shardkit.open_dataset(dst, decode=None)[3][0]
    array = shardkit.open_dataset(dst, decode="numpy")[3][0]
    tensor = shardkit.open_dataset(dst, decode="tensor")[3][0]
    image = shardkit.open_dataset(dst, decode="pil")[3][0]
    assert stored.shape == array.shape == (20, 28, 3)
    assert tuple(tensor.shape) == (3, 20, 28) and str(tensor.dtype) == "torch.uint8"
    assert image.mode == "RGB" and image.size == (28, 20)
    assert np.array_equal(tensor.permute(1, 2, 0).numpy(), array)
    assert np.array_equal(np.asarray(image), array) and np.array_equal(np.asarray(stored), array)


def test_writing_into_a_read_sample_never_changes_later_reads(smooth_tree: Path, tmp_path: Path,
                                                              fmt: str) -> None:
    dst = convert(smooth_tree, tmp_path / "ds", fmt, "raw")
    ds_numpy = shardkit.open_dataset(dst, decode="numpy")
    ds_tensor = shardkit.open_dataset(dst, decode="tensor")
    before = np.array(ds_numpy[2][0], copy=True)
    tensor = ds_tensor[2][0]
    tensor.fill_(7)
    array = ds_numpy[2][0]
    try:
        array[...] = 9                      # read-only views refuse; private copies accept
    except ValueError:
        assert not array.flags.writeable
    assert np.array_equal(ds_numpy[2][0], before)
    assert np.array_equal(ds_tensor[2][0].permute(1, 2, 0).numpy(), before)


def test_raw_batches_through_a_two_worker_dataloader(smooth_tree: Path, tmp_path: Path, fmt: str) -> None:
    import torch.utils.data
    dst = convert(smooth_tree, tmp_path / "ds", fmt, "raw", compression="gzip")
    ds = shardkit.open_dataset(dst, decode="tensor")
    loader = torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False, num_workers=2,
                                         worker_init_fn=shardkit.worker_init_fn)
    batches = list(loader)
    images = torch.cat([images for images, _ in batches])
    labels = torch.cat([labels for _, labels in batches])
    assert tuple(images.shape) == (10, 3, 20, 28)
    for index in range(len(ds)):
        assert torch.equal(images[index], ds[index][0]) and int(labels[index]) == ds[index][1]


def test_passthrough_reads_use_the_recorded_colour_handling(odd_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = convert(odd_tree, tmp_path / "ds", fmt, "passthrough", background="#00ff00")
    ds = shardkit.open_dataset(dst, decode="numpy")
    good = [rel for rel in ordered_images(odd_tree) if rel not in REFUSED]
    transparent = ds[good.index("ok/palette-transparent.png")][0]
    assert np.all(transparent[:, 20:] == [0, 255, 0])           # transparent half: the background
    rotated = ds[good.index("ok/exif-rotate-6.jpg")][0]
    assert rotated.shape == (40, 24, 3)                          # EXIF orientation applied on read
    wide = ds[good.index("ok/gray16.png")][0]
    assert wide[0, 0].tolist() == [255, 255, 255] and wide[0, 1].tolist() == [128, 128, 128]


def test_raw_shard_size_counts_array_bytes(odd_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "ds"
    shardkit.convert(str(odd_tree), str(dst), format=fmt, image_mode="raw", size=(16, 16), shard_size="4KB",
                     quiet=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    per_sample = 16 * 16 * 3
    assert all(entry["num_samples"] <= 4000 // per_sample for entry in manifest["shards"])
    assert sum(entry["num_samples"] for entry in manifest["shards"]) == len(ordered_images(odd_tree)) - 2


def test_cli_converts_raw_and_info_shows_the_codec(smooth_tree: Path, tmp_path: Path, fmt: str) -> None:
    from click.testing import CliRunner

    from shardkit.cli import main
    dst = tmp_path / "ds"
    result = CliRunner().invoke(main, ["convert", str(smooth_tree), str(dst), "--format", fmt, "--quiet",
                                       "--image-mode", "raw", "--size", "32", "24", "--compression", "gzip"])
    assert result.exit_code == 0, result.output
    info = CliRunner().invoke(main, ["info", str(dst)])
    assert info.exit_code == 0 and "image_mode=raw" in info.output and "uint8(32, 24, 3)" in info.output
    assert shardkit.open_dataset(dst, decode="numpy")[0][0].shape == (32, 24, 3)
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).resolve().parents[2] / "formats" / "manifest.schema.json").read_text())
    jsonschema.validate(json.loads((dst / "manifest.json").read_text()), schema)
