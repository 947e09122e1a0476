"""A shard is opened once, as a regular file inside DST, and its reader reads that very file: a
name swapped after the check (another shard, a link out of DST) is never what the reader sees,
whichever path a format takes (its locator and one map, or its library: h5py, lmdb, torch.load)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import CorruptShardError
from shardkit.formats import get_format, open_shard_file, recorded_options
from shardkit.manifest import load_manifest

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _swap_after_check(dst: Path, replacement: Path) -> "tuple[str, object]":
    """dst's identity, and a reader of dst's shard 0 opened through its checked descriptor after
    the name was given to the file at replacement."""
    manifest = load_manifest(dst)
    fmt = get_format(manifest.format_name)
    entry = manifest.shards[0]
    path = str(dst / entry.path)
    fd = open_shard_file(path, str(dst), entry.size, "shard 0")
    try:
        os.replace(replacement, path)
        return manifest.dataset_id, fmt.open_reader(path, manifest.schema, recorded_options(fmt, manifest, str(dst)),
                                                    fd)
    finally:
        os.close(fd)


def _copies(source: Path, tmp_path: Path) -> "tuple[Path, Path]":
    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(source, first)
    shutil.copytree(source, second)
    return first, second


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_reader_reads_the_checked_file_not_what_its_name_became(dataset_dir: Path, image_tree: Path,
                                                                  tmp_path: Path, fmt: str) -> None:
    """(Mutation: a reader that opens its path again instead of the descriptor: this fails.)"""
    other = tmp_path / "other"
    shardkit.convert(str(image_tree), str(other), format=fmt, samples_per_shard=8, seed=1, quiet=True)
    dst = tmp_path / "dst"
    shutil.copytree(dataset_dir, dst)
    with shardkit.open_dataset(dst, decode=None) as ds:
        expected = ds.read_encoded(0)
        expected.payload = bytes(memoryview(expected.payload))
    identity, reader = _swap_after_check(dst, other / load_manifest(other).shards[0].path)
    try:
        assert reader.dataset_id == identity != load_manifest(other).dataset_id
        assert bytes(reader.read(0).payload) == bytes(expected.payload)
    finally:
        reader.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
@pytest.mark.parametrize("golden", ["hdf5-v2", "pt-v2", "hdf5-v3-raw-gzip"])
def test_the_library_path_reads_the_checked_file_too(golden: str, tmp_path: Path) -> None:
    """Shards without a locator (versions 1-2) or with compressed data open through h5py or
    torch.load, by the descriptor's /proc name: they read the checked file, or (HDF5, which looks
    up the real path of the name it is given, and finds the replaced file gone) refuse it; never the
    file now at that path. (Mutation: h5py.File(path) or torch.load(path): this fails.)"""
    first, second = _copies(GOLDEN / golden, tmp_path)
    shutil.copyfile(second / load_manifest(second).shards[1].path, second / load_manifest(second).shards[0].path)
    # second's shard 0 now holds shard 1's samples: a swap shows as a different count or first sample
    with shardkit.open_dataset(first, decode=None) as ds:
        expected = ds.read_encoded(0)
        expected.payload = bytes(memoryview(expected.payload))
    entry = load_manifest(first).shards[0]
    try:
        _, reader = _swap_after_check(first, second / entry.path)
    except CorruptShardError as exc:
        assert golden.startswith("hdf5") and "cannot open HDF5 shard" in str(exc)
        return
    try:
        assert len(reader) == entry.num_samples
        assert bytes(memoryview(reader.read(0).payload)) == bytes(memoryview(expected.payload))
    finally:
        reader.close()


def test_verify_deep_cross_checks_the_checked_file_not_what_its_name_became(
        writable_dataset: Path, fmt: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """verify --deep compares the format library's view of a shard with its reader's through the
    descriptor it checked and hashed: the shard's name moved away (and another file put there) after
    that check changes nothing. The move is made at a fixed point, right after the reader opened.
    (Mutation: cross_check opening the path again, as it did: the moved-in file is reported.)"""
    fmt_object = get_format(fmt)
    if fmt_object.crafted_files_crash:
        pytest.skip("its shards are checked in child processes (isolation.py), which the fixed point does not reach")
    manifest = load_manifest(writable_dataset)
    target = str(writable_dataset / manifest.shards[1].path)
    real_open = type(fmt_object).open_reader

    def open_then_move(self, path, schema, options=None, fd=None):  # noqa: ANN001, ANN202 - the format's signature
        reader = real_open(self, path, schema, options, fd)
        if path == target and os.path.exists(target):
            os.replace(target, tmp_path / "moved")
            with open(target, "wb") as other:
                other.write(b"not a shard" * 100)
        return reader

    monkeypatch.setattr(type(fmt_object), "open_reader", open_then_move)
    report = shardkit.verify(str(writable_dataset), mode="deep", workers=1)
    assert (tmp_path / "moved").exists()
    assert report.ok, report.problems
    assert report.samples_checked == manifest.num_samples
