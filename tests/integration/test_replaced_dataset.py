"""A dataset converted again into the same folder under an open dataset object: the old object
raises ForeignShardError naming the shard, never serves the new samples (issue finding: HDF5
shards of the same shape have the same size, so the size check alone let them through)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import shardkit
from shardkit.samples import make_image_tree


def _tree(root: Path, invert: bool) -> None:
    """The same names, labels and count each time; inverted pixels the second time."""
    make_image_tree(str(root), num_images=24, classes=("a", "b"), seed=4, sizes=(6, 12))
    if invert:
        for path in sorted(root.rglob("*.*")):
            image = Image.open(path).convert("RGB")
            Image.fromarray(255 - np.asarray(image)).save(path, format=image.format or "PNG")


@pytest.mark.parametrize("checks", [False, True], ids=["unchecked", "checksums"])
def test_old_dataset_object_refuses_the_replacing_dataset(tmp_path: Path, fmt: str, checks: bool) -> None:
    first, second, dst = tmp_path / "first", tmp_path / "second", tmp_path / "dst"
    _tree(first, invert=False)
    _tree(second, invert=True)
    options = dict(format=fmt, image_mode="raw", size=(4, 4), samples_per_shard=8, quiet=True)
    shardkit.convert(str(first), str(dst), **options)
    old = shardkit.open_dataset(dst, decode="numpy", verify_checksums=checks)
    before = old[0][0].copy()
    sizes = [path.stat().st_size for path in sorted((dst / "shards").iterdir())]
    old.close()                         # as after an eviction: the next read opens the file again
    shardkit.convert(str(second), str(dst), overwrite=True, **options)
    assert [path.stat().st_size for path in sorted((dst / "shards").iterdir())] == sizes   # sizes alone pass
    new = shardkit.open_dataset(dst, decode="numpy")
    assert not np.array_equal(new[0][0], before)
    for index in (0, 20):               # the shard it had open before, and one it never opened
        with pytest.raises(shardkit.ForeignShardError, match=r"shard-0000\d.*belongs to another dataset"):
            old[index]
    with pytest.raises(shardkit.ForeignShardError):
        old.key(9)
    with pytest.raises(shardkit.ForeignShardError):
        old.__getitems__([9, 1, 18])    # a batch checks every shard it opens as ds[i] does
    assert np.array_equal(shardkit.open_dataset(dst, decode="numpy")[0][0], new[0][0])
    old.close()
    new.close()


def test_a_new_dataset_object_does_not_take_the_old_ones_handle(tmp_path: Path, fmt: str) -> None:
    """The other order: the new object opens the shard first; the old one must still refuse it."""
    first, second, dst = tmp_path / "first", tmp_path / "second", tmp_path / "dst"
    _tree(first, invert=False)
    _tree(second, invert=True)
    options = dict(format=fmt, image_mode="raw", size=(4, 4), samples_per_shard=8, quiet=True)
    shardkit.convert(str(first), str(dst), **options)
    old = shardkit.open_dataset(dst, decode="numpy")
    shardkit.convert(str(second), str(dst), overwrite=True, **options)
    new = shardkit.open_dataset(dst, decode="numpy")
    new[0]
    with pytest.raises(shardkit.ForeignShardError):
        old.__getitems__([1, 2])
    with pytest.raises(shardkit.ForeignShardError):
        old[1]
    old.close()
    new.close()


def test_verify_reports_a_shard_of_another_dataset(tmp_path: Path, fmt: str) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    _tree(first, invert=False)
    _tree(second, invert=True)
    options = dict(format=fmt, image_mode="raw", size=(4, 4), samples_per_shard=8, quiet=True)
    shardkit.convert(str(first), str(tmp_path / "a"), **options)
    shardkit.convert(str(second), str(tmp_path / "b"), **options)
    shard = sorted((tmp_path / "a" / "shards").iterdir())[1]
    shard.write_bytes((tmp_path / "b" / "shards" / shard.name).read_bytes())
    report = shardkit.verify(str(tmp_path / "a"), mode="quick")
    assert [(problem.kind, problem.shard) for problem in report.problems] == [("identity", f"shards/{shard.name}")]
    assert "belongs to another dataset" in report.problems[0].message


def test_the_identity_is_the_same_for_the_same_input_and_options(tmp_path: Path, fmt: str) -> None:
    src = tmp_path / "src"
    _tree(src, invert=False)
    for name in ("one", "two"):
        shardkit.convert(str(src), str(tmp_path / name), format=fmt, samples_per_shard=8, quiet=True)
    ids = [shardkit.open_dataset(tmp_path / name).manifest.dataset_id for name in ("one", "two")]
    assert ids[0] == ids[1] and len(ids[0]) == 32
    shardkit.convert(str(src), str(tmp_path / "three"), format=fmt, samples_per_shard=9, quiet=True)
    assert shardkit.open_dataset(tmp_path / "three").manifest.dataset_id != ids[0]
