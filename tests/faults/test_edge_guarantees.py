"""Guarantees at the edges that an audit found untested: each test here fails under the one-line
mutation named in its docstring (see docs/architecture.md, "Testing habits")."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List

import h5py
import pytest

import shardkit
from shardkit.errors import ConversionError, CorruptSampleError
from shardkit.integrity import hash_file

from .crafting import reseal
from .helpers import flip_bit, make_tiny_tree, shard_paths

BLOCK = 4 * 1024 * 1024


def test_damage_past_the_first_hash_block_is_found(image_tree: Path, tmp_path: Path) -> None:
    """Mutation: integrity.hash_file hashes only its first 4 MiB block."""
    dst = tmp_path / "raw"
    shardkit.convert(str(image_tree), str(dst), image_mode="raw", size=(160, 160), samples_per_shard=60, quiet=True)
    first = shard_paths(dst)[0]
    assert first.stat().st_size > BLOCK + 4096
    flip_bit(first, BLOCK + 2048, 3)
    report = shardkit.verify(str(dst), mode="full")
    assert [(problem.kind, problem.shard) for problem in report.problems] == [("checksum", f"shards/{first.name}")]


def test_reader_refuses_a_label_outside_the_classes(image_tree: Path, tmp_path: Path) -> None:
    """Mutation: the dataset's label-range check under verify_checksums is removed. (The check is
    the dataset's own, for every format; the label is rewritten in an HDF5 shard with h5py.)"""
    dst = tmp_path / "copy"
    shardkit.convert(str(image_tree), str(dst), format="hdf5", samples_per_shard=16, quiet=True)
    with h5py.File(shard_paths(dst)[1], "r+") as handle:
        labels = handle["labels"][()]
        labels[5] = 99
        handle["labels"][...] = labels
    reseal(dst)     # manifest and sample table agree with the rewritten shard: the range check is left
    index = 16 + 5
    plain = shardkit.open_dataset(dst, decode=None)
    assert plain[index][1] == 99                               # unchecked reads pass it through
    checked = shardkit.open_dataset(dst, decode=None, verify_checksums=True)
    with pytest.raises(CorruptSampleError, match="has label 99, outside the 4 classes") as caught:
        checked[index]
    assert (caught.value.index, caught.value.global_index) == (5, index)
    plain.close()
    checked.close()


def test_negative_indices_follow_python(dataset_dir: Path) -> None:
    """Mutation: a negative index returns sample 0."""
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    size = len(ds)
    for negative in (-1, -2, -17, -size):
        assert bytes(memoryview(ds[negative][0])) == bytes(memoryview(ds[size + negative][0]))
        assert ds[negative][1] == ds[size + negative][1]
    with pytest.raises(IndexError):
        ds[-size - 1]
    with pytest.raises(IndexError):
        ds[size]


@pytest.fixture
def broken_tree(tmp_path: Path) -> Path:
    """12 tiny images in 3 classes, two of them undecodable: one in the first shard (of 4
    samples) and one in the last."""
    src = tmp_path / "src"
    written = sorted(make_tiny_tree(src, 12, seed=5), key=lambda rel: tuple(rel.split("/")))
    for rel in (written[1], written[-1]):
        (src / rel).write_bytes(b"not an image at all")
    return src


def _skipped_paths(dst: Path) -> List[str]:
    return sorted(json.loads(line)["path"] for line in (dst / "skipped.jsonl").read_text().splitlines())


def _fail_then_resume(src: Path, dst: Path) -> None:
    """A run stopped by --max-errors 1 at the second broken input (the last shard), after the
    first shard (with one skipped input) was finished; then --resume without the limit."""
    with pytest.raises(ConversionError, match="more than 1 inputs failed"):
        shardkit.convert(str(src), str(dst), samples_per_shard=4, max_errors=1, quiet=True)
    assert not (dst / "manifest.json").exists() and shard_paths_done(dst)


def shard_paths_done(dst: Path) -> List[str]:
    return sorted(os.listdir(dst / ".shardkit" / "done"))


def test_resume_keeps_the_skipped_inputs_of_finished_shards(broken_tree: Path, tmp_path: Path) -> None:
    """Mutation: resume drops the skipped entries of shards finished by the earlier run."""
    dst = tmp_path / "dst"
    _fail_then_resume(broken_tree, dst)
    report = shardkit.convert(str(broken_tree), str(dst), samples_per_shard=4, resume=True, quiet=True)
    assert report.skipped == 2 and report.num_samples == 10
    assert len(_skipped_paths(dst)) == 2
    whole = tmp_path / "whole"
    shardkit.convert(str(broken_tree), str(whole), samples_per_shard=4, quiet=True)
    assert _skipped_paths(dst) == _skipped_paths(whole)


def test_max_errors_on_resume_names_the_first_skipped_input(tmp_path: Path) -> None:
    """Mutation: the message's "first:" names the last input skipped by the finished shards.
    A run stopped by --max-errors 2 finished its first shard with two skipped inputs; resumed
    with --max-errors 1 it stops before writing anything and names the first of the two, the
    first line of skipped.jsonl."""
    src = tmp_path / "src"
    written = sorted(make_tiny_tree(src, 12, seed=5), key=lambda rel: tuple(rel.split("/")))
    for rel in (written[0], written[2], written[-1]):
        (src / rel).write_bytes(b"not an image at all")
    dst = tmp_path / "dst"
    with pytest.raises(ConversionError, match="more than 2 inputs failed"):
        shardkit.convert(src, dst, order="source", samples_per_shard=4, max_errors=2)
    assert shard_paths_done(dst)
    with pytest.raises(ConversionError, match="more than 1 inputs failed") as stopped:
        shardkit.convert(src, dst, order="source", samples_per_shard=4, max_errors=1, resume=True)
    assert f"first: {written[0]}:" in str(stopped.value)
    assert written[2] not in str(stopped.value)


def test_resume_rewrites_a_finished_shard_whose_size_changed(broken_tree: Path, tmp_path: Path) -> None:
    """Mutation: resume trusts a done record without comparing the file's size."""
    dst = tmp_path / "dst"
    _fail_then_resume(broken_tree, dst)
    first = dst / "shards" / sorted(os.listdir(dst / "shards"))[0]
    good = hash_file(first)
    with open(first, "ab") as handle:
        handle.write(b"\0")
    shardkit.convert(str(broken_tree), str(dst), samples_per_shard=4, resume=True, quiet=True)
    assert hash_file(first) == good
    assert shardkit.verify(str(dst), mode="deep").ok


def test_on_error_fail_names_the_first_failure(broken_tree: Path, tmp_path: Path) -> None:
    """Mutation: --on-error fail names the last failed input instead of the first."""
    written = sorted((str(path.relative_to(broken_tree)) for path in broken_tree.rglob("*.*")),
                     key=lambda rel: tuple(rel.split("/")))
    (broken_tree / written[2]).write_bytes(b"broken too")       # two failures in the first shard
    with pytest.raises(ConversionError) as caught:
        shardkit.convert(str(broken_tree), str(tmp_path / "dst"), samples_per_shard=4, on_error="fail", quiet=True)
    assert str(caught.value).startswith(f"{written[1]}: ") and "--on-error fail" in str(caught.value)
    # Two inputs rejected during the scan (broken links): the first in path order is named.
    for name in ("a-link.png", "b-link.png"):
        os.symlink("missing-target", broken_tree / "class0" / name)
    with pytest.raises(ConversionError) as caught:
        shardkit.convert(str(broken_tree), str(tmp_path / "dst2"), samples_per_shard=4, on_error="fail", quiet=True)
    assert str(caught.value).startswith("class0/a-link.png: broken symbolic link")
