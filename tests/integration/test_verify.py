"""verify finds and names a flipped bit, a truncated shard, a missing shard and extra files."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import shardkit


def _shards(dst: Path) -> list:
    return [dst / entry["path"] for entry in json.loads((dst / "manifest.json").read_text())["shards"]]


def _flip_bit(path: Path, offset: int, bit: int = 0) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        byte = handle.read(1)[0]
        handle.seek(offset)
        handle.write(bytes([byte ^ (1 << bit)]))


@pytest.mark.parametrize("mode", ["quick", "full", "deep"])
def test_intact_dataset_passes(dataset_dir: Path, mode: str) -> None:
    report = shardkit.verify(str(dataset_dir), mode=mode)
    assert report.ok, report.problems
    assert report.shards_checked == len(_shards(dataset_dir))
    assert report.samples_checked == (120 if mode == "deep" else 0)


def test_flipped_bit_is_found_and_named(writable_dataset: Path) -> None:
    shard = _shards(writable_dataset)[2]
    ds = shardkit.open_dataset(writable_dataset, decode=None)
    # flip a bit inside the payload of the 3rd sample of shard 2 (located through the reader)
    payload = bytes(memoryview(ds[2 * 16 + 3][0]))
    offset = shard.read_bytes().find(payload) + len(payload) // 2
    assert offset > len(payload) // 2
    _flip_bit(shard, offset)
    assert shardkit.verify(str(writable_dataset), mode="quick").ok  # sizes and counts still match
    full = shardkit.verify(str(writable_dataset), mode="full")
    assert [p.kind for p in full.problems] == ["checksum"]
    assert str(shard) in full.problems[0].message
    deep = shardkit.verify(str(writable_dataset), mode="deep")
    samples = [p for p in deep.problems if p.kind == "sample"]
    assert [(p.shard, p.index) for p in samples] == [(f"shards/{shard.name}", 3)]
    reader = shardkit.open_dataset(writable_dataset, decode=None, verify_checksums=True)
    with pytest.raises(shardkit.CorruptSampleError) as caught:
        reader[2 * 16 + 3]
    assert caught.value.index == 3 and shard.name in str(caught.value)


def test_truncated_missing_and_extra(writable_dataset: Path) -> None:
    shards = _shards(writable_dataset)
    with open(shards[0], "r+b") as handle:
        handle.truncate(os.path.getsize(shards[0]) - 100)
    shards[1].unlink()
    (writable_dataset / "shards" / "stray.bin").write_bytes(b"junk")
    report = shardkit.verify(str(writable_dataset), mode="full")
    kinds = {(p.kind, p.shard) for p in report.problems}
    assert ("size", f"shards/{shards[0].name}") in kinds
    assert ("missing", f"shards/{shards[1].name}") in kinds
    assert ("extra", "shards/stray.bin") in kinds
    ds = shardkit.open_dataset(writable_dataset, decode=None)
    with pytest.raises(shardkit.CorruptShardError, match=shards[0].name):
        ds[0]
    with pytest.raises(shardkit.CorruptShardError, match="missing"):
        ds[16]


def test_edited_manifest_is_refused(writable_dataset: Path) -> None:
    path = writable_dataset / "manifest.json"
    data = json.loads(path.read_text())
    data["classes"][0] = "renamed"
    path.write_text(json.dumps(data))
    report = shardkit.verify(str(writable_dataset))
    assert [p.kind for p in report.problems] == ["manifest"]
    with pytest.raises(shardkit.ManifestError, match="edited"):
        shardkit.open_dataset(writable_dataset)


def test_parallel_verify_reports_everything(writable_dataset: Path) -> None:
    shards = _shards(writable_dataset)
    for shard in shards[:3]:
        _flip_bit(shard, os.path.getsize(shard) // 2, 5)
    report = shardkit.verify(str(writable_dataset), mode="full", workers=2)
    assert sorted(p.shard for p in report.problems) == sorted(f"shards/{s.name}" for s in shards[:3])
