"""Image tree -> shards -> Dataset: bytes, labels, order and determinism, for every format."""
from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

import shardkit
from shardkit.samples import make_image_tree

from ..conftest import files_in_dataset_order, image_files


def test_passthrough_round_trip_is_byte_identical(dataset_dir: Path, image_tree: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    files = files_in_dataset_order(image_tree, dataset_dir)
    assert len(ds) == len(files) == 120
    assert ds.classes == ["circle", "square", "stripes", "triangle"]
    for index, rel in enumerate(files):
        payload, label = ds[index]
        assert bytes(memoryview(payload)) == (image_tree / rel).read_bytes(), rel
        assert ds.classes[label] == rel.split("/")[0]


def test_decode_modes(dataset_dir: Path, image_tree: Path) -> None:
    from PIL import Image
    first = files_in_dataset_order(image_tree, dataset_dir)[0]
    with Image.open(image_tree / first) as original:
        expected = np.asarray(original.convert("RGB"))
    pil_image, label = shardkit.open_dataset(dataset_dir, decode="pil")[0]
    assert pil_image.mode == "RGB" and pil_image.size == (expected.shape[1], expected.shape[0])
    array, _ = shardkit.open_dataset(dataset_dir, decode="numpy")[0]
    np.testing.assert_array_equal(array, expected)
    tensor, _ = shardkit.open_dataset(dataset_dir, decode="tensor")[0]
    assert tuple(tensor.shape) == (3, expected.shape[0], expected.shape[1])
    np.testing.assert_array_equal(tensor.permute(1, 2, 0).numpy(), expected)


def test_transforms_and_metadata(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None, transform=lambda p: len(p),
                               target_transform=lambda y: f"class-{y}")
    size, label = ds[5]
    assert isinstance(size, int) and size > 0
    assert label.startswith("class-")
    assert ds.class_to_idx == {name: i for i, name in enumerate(ds.classes)}
    assert ds.manifest.num_samples == len(ds)
    assert ds[-1] is not None
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_dataset_class_matches_format(dataset_dir: Path, fmt: str) -> None:
    ds = shardkit.open_dataset(dataset_dir)
    assert ds.manifest.format_name == fmt
    wrong = [cls for cls in (shardkit.HDF5Dataset, shardkit.LMDBDataset, shardkit.PTDataset)
             if cls.format_name != fmt]
    for cls in wrong:
        with pytest.raises(shardkit.UsageError):
            cls(dataset_dir)


def test_targets_and_labels(dataset_dir: Path, image_tree: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    expected = [ds.classes.index(rel.split("/")[0]) for rel in files_in_dataset_order(image_tree, dataset_dir)]
    assert ds.targets().tolist() == expected


def test_two_conversions_are_byte_identical(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    digests = []
    for run, workers in enumerate((1, 2)):
        dst = tmp_path / f"run{run}"
        shardkit.convert(str(image_tree), str(dst), format=fmt, samples_per_shard=25, workers=workers, quiet=True)
        digests.append({p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in sorted((dst / "shards").iterdir())})
        manifest = json.loads((dst / "manifest.json").read_text())
        assert [s["num_samples"] for s in manifest["shards"]] == [25, 25, 25, 25, 20]
    assert digests[0] == digests[1]


def test_shard_size_in_bytes(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "bysize"
    report = shardkit.convert(str(image_tree), str(dst), format=fmt, shard_size="500KB", quiet=True)
    sizes = [p.stat().st_size for p in (dst / "shards").iterdir()]
    manifest = shardkit.open_dataset(dst).manifest
    assert report.num_shards == len(manifest.shards) > 2
    assert [e.path for e in manifest.shards] == [f"shards/shard-{i:05d}{Path(e.path).suffix}"
                                                 for i, e in enumerate(manifest.shards)]
    assert max(sizes) < 2 * 500_000  # payload bound + format overhead


def test_labels_csv_and_unlabeled(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    files = image_files(image_tree)
    labels = tmp_path / "labels.csv"
    # label by parity of the file number, with numeric-looking class names
    labels.write_text("file,target\n" + "".join(f"{rel},{int(rel[-10:-4]) % 2 * 10}\n" for rel in files))
    dst = tmp_path / "labelled"
    shardkit.convert(str(image_tree), str(dst), format=fmt, labels=str(labels), path_column="file",
                     label_column="target", quiet=True)
    ds = shardkit.open_dataset(dst, decode=None)
    files = files_in_dataset_order(image_tree, dst)
    assert ds.classes == ["0", "10"]
    assert [label for _, label in (ds[i] for i in range(len(ds)))] == [int(r[-10:-4]) % 2 for r in files]

    dst = tmp_path / "unlabelled"
    shardkit.convert(str(image_tree), str(dst), format=fmt, no_labels=True, order="source", quiet=True)
    ds = shardkit.open_dataset(dst, decode=None)
    files = image_files(image_tree)
    assert ds.classes == [] and len(ds) == len(files)
    assert bytes(memoryview(ds[0])) == (image_tree / files[0]).read_bytes()


def test_dataset_pickles_without_handles(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    before = bytes(memoryview(ds[3][0]))
    clone = pickle.loads(pickle.dumps(ds))
    assert bytes(memoryview(clone[3][0])) == before
    assert len(pickle.dumps(ds)) < 20_000


def test_more_shards_than_open_handles(image_tree: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "many"
    shardkit.convert(str(image_tree), str(dst), format=fmt, samples_per_shard=4, quiet=True)
    ds = shardkit.open_dataset(dst, decode=None, max_open_shards=3)
    rng = np.random.default_rng(0)
    files = files_in_dataset_order(image_tree, dst)
    for index in rng.permutation(len(ds))[:80]:
        assert bytes(memoryview(ds[int(index)][0])) == (image_tree / files[index]).read_bytes()
        assert len(ds.shard_cache.info().open) <= 3


def test_open_same_dataset_twice(dataset_dir: Path) -> None:
    first = shardkit.open_dataset(dataset_dir, decode=None)
    second = shardkit.open_dataset(dataset_dir, decode=None)
    assert bytes(memoryview(first[7][0])) == bytes(memoryview(second[7][0]))


def test_non_image_files_counted_and_ignored(tmp_path: Path, fmt: str) -> None:
    src = tmp_path / "src"
    make_image_tree(str(src), num_images=12, seed=4)
    (src / "circle" / "notes.txt").write_text("not an image")
    (src / "README").write_text("top-level file")
    dst = tmp_path / "dst"
    report = shardkit.convert(str(src), str(dst), format=fmt, quiet=True)
    assert report.num_samples == 12 and report.skipped == 0
    summary = shardkit.open_dataset(dst).manifest.source["summary"]
    assert summary["other_files"] == 2 and summary["converted"] == 12
    assert (dst / "skipped.jsonl").read_text() == ""
