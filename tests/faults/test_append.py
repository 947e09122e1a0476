"""`convert NEW_SRC DST --append`: new inputs become new shards published by a new manifest, old
shards keep their bytes, readers of the old manifest keep the old dataset (its sample table
included), inputs already in DST are skipped, a key with other content and options that conflict
with the dataset are refused, a kill -9 leaves the old dataset verifiable and a rerun finishes it
byte-identical to an uninterrupted append.

Mutations caught here: the new sample table written under the old name (the reader that opened the
old manifest fails); shards stamped with the append plan's own identity (verify and readers refuse
them); new classes sorted in among the old ones (old labels change); a duplicate's content not
compared (the changed input is appended)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

import shardkit
from shardkit.errors import ConversionError

from .helpers import (EPOCH, REPO, assert_no_traceback, error_lines, kill_append_and_rerun, make_tiny_tree, run_cli,
                      tree_bytes, wait_for)


def _trees(tmp_path: Path) -> "tuple[Path, Path]":
    """OLD (3 classes) and NEW: two of OLD's files again (same content), and new files in an old
    class and in two new classes that sort before and after the old ones."""
    old, new = tmp_path / "old", tmp_path / "new"
    make_tiny_tree(old, 12, seed=1)
    make_tiny_tree(tmp_path / "extra", 6, seed=9, classes=3)
    for rel in ("class0/00000.png", "class1/00001.jpg"):
        (new / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(old / rel, new / rel)
    for number, target in enumerate(("class1", "aaa", "zzz", "zzz", "class2", "aaa")):
        source = sorted((tmp_path / "extra").rglob("*.*"))[number]
        (new / target).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, new / target / f"new{number}{source.suffix}")
    return old, new


def _samples(dst: Path) -> Dict[str, tuple]:
    """key -> (label, class name, stored bytes) of every sample."""
    with shardkit.open_dataset(dst, decode=None, verify_checksums=True) as ds:
        return {ds.key(i): (ds[i][1], ds.classes[ds[i][1]], bytes(ds[i][0])) for i in range(len(ds))}


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
def test_append_adds_shards_and_keeps_old_ones(tmp_path: Path, fmt: str) -> None:
    old, new = _trees(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, format=fmt, samples_per_shard=4, workers=1)
    before_files = tree_bytes(dst / "shards")
    before_manifest = json.loads((dst / "manifest.json").read_text())
    before = _samples(dst)
    report = shardkit.convert(new, dst, append=True, workers=1)
    assert report.warnings == ["2 inputs already in DST (same key and content) were skipped"]
    after_manifest = json.loads((dst / "manifest.json").read_text())
    assert after_manifest["shards"][:3] == before_manifest["shards"]                  # same entries, sha256
    assert {name: data for name, data in tree_bytes(dst / "shards").items() if name in before_files} == before_files
    assert shardkit.verify(dst, mode="deep").ok
    after = _samples(dst)
    assert after_manifest["classes"] == ["class0", "class1", "class2", "aaa", "zzz"]
    assert {key: after[key] for key in before} == before                            # labels never change
    assert sorted(set(after) - set(before)) == sorted(f"{target}/{path.name}" for target in ("aaa", "class1",
                                                      "class2", "zzz") for path in (new / target).glob("new*"))
    assert {after[key][1] for key in after if key.startswith("aaa/")} == {"aaa"}
    assert {after[key][1] for key in after if key.startswith("zzz/")} == {"zzz"}
    again = shardkit.convert(new, dst, append=True, workers=1)                       # everything is in DST now
    assert again.warnings == ["8 inputs already in DST (same key and content) were skipped", "nothing new to append"]


def test_a_key_with_other_content_is_refused_and_dst_untouched(tmp_path: Path) -> None:
    old, new = _trees(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, samples_per_shard=4, workers=1)
    shutil.copyfile(old / "class0" / "00003.png", new / "class0" / "00000.png")
    before = tree_bytes(dst)
    with pytest.raises(ConversionError, match=r"'class0/00000\.png' is already in DST \(sample \d+\) with other"):
        shardkit.convert(new, dst, append=True, workers=1)
    assert tree_bytes(dst) == before


@pytest.mark.parametrize("option, value, says", [
    ("--format", "lmdb", "--format lmdb conflicts with the dataset (converted with --format hdf5)"),
    ("--image-mode", "png", "--image-mode png conflicts with the dataset (converted without it)"),
    ("--samples-per-shard", "5", "--samples-per-shard 5 conflicts with the dataset (converted with "
                                 "--samples-per-shard 4)"),
])
def test_options_that_conflict_with_the_dataset_are_refused(tmp_path: Path, option: str, value: str,
                                                            says: str) -> None:
    old, new = _trees(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, samples_per_shard=4, workers=1)
    result = run_cli("convert", new, dst, "--append", option, value, "--quiet")
    assert result.returncode == 2
    assert_no_traceback(result)
    assert error_lines(result) == [f"error: {dst}: {says}; --append takes the dataset's own options"]
    ok = run_cli("convert", new, dst, "--append", "--samples-per-shard", "4", "--quiet")   # the same value: fine
    assert ok.returncode == 0, ok.stderr


_READER = """
import json, os, sys, time
import shardkit
dst, opened, go = sys.argv[1:4]
ds = shardkit.open_dataset(dst, decode=None, verify_checksums=True)   # the manifest before the append
open(opened, "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
rows = [[ds.key(i), int(ds[i][1]), bytes(ds[i][0]).hex()] for i in range(len(ds))]
print(json.dumps(rows))
"""


def test_a_reader_of_the_old_manifest_keeps_the_old_dataset(tmp_path: Path) -> None:
    old, new = _trees(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, samples_per_shard=4, workers=1)
    expected = [[key, label, data.hex()] for key, (label, _, data) in _samples(dst).items()]
    opened, go = tmp_path / "opened", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    reader = subprocess.Popen([sys.executable, "-c", _READER, str(dst), str(opened), str(go)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_for(opened.exists, 60)
        shardkit.convert(new, dst, append=True, workers=1)
        go.touch()
        out, err = reader.communicate(timeout=60)
    finally:
        reader.kill()
    assert reader.returncode == 0, err
    assert json.loads(out) == expected                                  # the old dataset, consistently
    assert len(shardkit.open_dataset(dst)) == len(expected) + 6        # a new reader sees both


@pytest.mark.parametrize("point", ["shard-written", "append-publish"])
def test_kill_9_during_append_keeps_the_old_dataset_and_a_rerun_finishes_it(
        tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH["SOURCE_DATE_EPOCH"])
    old, new = _trees(tmp_path)
    kill_append_and_rerun(lambda dst: shardkit.convert(old, dst, samples_per_shard=2, workers=1), new, tmp_path, point,
                          "shard-00007.h5", old_samples=12)


def test_repair_after_append_rebuilds_old_and_appended_shards_from_their_srcs(tmp_path: Path) -> None:
    """Shards of the conversion come from its SRC, appended ones from the append's NEW_SRC (given
    after it, in order); without that NEW_SRC a damaged appended shard is refused naming it.
    Mutation: restricting the append's source to every input of NEW_SRC (no keys already in the
    shards before it taken out) rebuilds other shards, refused by their sha256."""
    old, new = _trees(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, samples_per_shard=4, workers=1)
    shardkit.convert(new, dst, append=True, workers=1)
    expected = tree_bytes(dst)
    shards: List[Path] = [dst / entry["path"] for entry in json.loads((dst / "manifest.json").read_text())["shards"]]
    shards[1].unlink()
    assert shardkit.repair(dst, old).shards_written == 1
    assert tree_bytes(dst) == expected
    shards[-1].unlink()
    result = run_cli("repair", dst, "--from", old)
    assert result.returncode == 2
    assert f"shard {len(shards) - 1} ({shards[-1].relative_to(dst)}) was appended from {new}" in error_lines(result)[0]
    shards[0].write_bytes(b"damaged")
    moved = tmp_path / "moved-new"
    shutil.copytree(new, moved, copy_function=shutil.copyfile)        # other path, other mtimes
    result = run_cli("repair", dst, "--from", old, "--from", moved)
    assert result.returncode == 0, result.stderr
    assert "2 of" in result.stdout and tree_bytes(dst) == expected
    assert shardkit.verify(dst).ok
    too_many = run_cli("repair", dst, "--from", old, "--from", new, "--from", new)
    assert too_many.returncode == 2 and "at most one SRC for each of its 1 appends" in error_lines(too_many)[0]


def test_repair_scans_only_the_srcs_of_damaged_shards(tmp_path: Path) -> None:
    """An append's NEW_SRC is not read when none of its shards is damaged (here it no longer
    exists). Mutation: scanning every given SRC raises for the missing one."""
    old, new = _trees(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, samples_per_shard=4, workers=1)
    shardkit.convert(new, dst, append=True, workers=1)
    expected = tree_bytes(dst)
    shutil.rmtree(new)
    (dst / json.loads((dst / "manifest.json").read_text())["shards"][0]["path"]).unlink()
    assert shardkit.repair(dst, [old, new]).shards_written == 1
    assert tree_bytes(dst) == expected


def test_append_needs_a_finished_dataset(tmp_path: Path) -> None:
    old, new = _trees(tmp_path)
    result = run_cli("convert", new, tmp_path / "nothing", "--append")
    assert result.returncode == 2 and len(error_lines(result)) == 1
    assert_no_traceback(result)


def test_each_append_keeps_its_table_and_the_one_before_and_drops_older_ones(tmp_path: Path) -> None:
    """DST holds no more sample tables than the current manifest and the one before it name, and a
    reader that opened and read the dataset before two appends keeps reading its samples (its table
    is mapped; only a new read of all its labels, targets(), would look for the file again)."""
    old, new = _trees(tmp_path)
    make_tiny_tree(tmp_path / "third-drawn", 4, seed=31, classes=2)
    third = tmp_path / "third"
    for number, source in enumerate(sorted((tmp_path / "third-drawn").rglob("*.*"))):
        (third / "class0").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, third / "class0" / f"third{number}{source.suffix}")
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, samples_per_shard=4, workers=1)

    def tables() -> List[str]:
        return sorted(path.name for path in dst.glob("sample_table*"))
    first = shardkit.open_dataset(dst, decode=None)
    expected = [(first.key(i), first[i][1]) for i in range(len(first))]
    assert tables() == ["sample_table.bin"]
    shardkit.convert(new, dst, append=True, workers=1)
    assert tables() == ["sample_table-18.bin", "sample_table.bin"]     # the reader of the old manifest keeps its own
    shardkit.convert(third, dst, append=True, workers=1)
    assert tables() == ["sample_table-18.bin", "sample_table-22.bin"]
    assert json.loads((dst / "manifest.json").read_text())["sample_table"]["path"] == "sample_table-22.bin"
    assert [(first.key(i), first[i][1]) for i in range(len(first))] == expected
    first.close()
    assert shardkit.verify(dst, mode="full").ok and len(shardkit.open_dataset(dst)) == 22
