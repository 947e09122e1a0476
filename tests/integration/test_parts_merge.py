"""--part I/N on several 'machines', then merge: the same samples, order and shard bytes as one run."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main


def _digests(dst: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((dst / "shards").iterdir())}


@pytest.mark.parametrize("count", [3])
def test_parts_merge_to_the_single_run(image_tree: Path, tmp_path: Path, fmt: str, count: int) -> None:
    single = tmp_path / "single"
    shardkit.convert(str(image_tree), str(single), format=fmt, samples_per_shard=10, quiet=True)
    parts = []
    for index in range(count):
        part = tmp_path / f"part{index}"
        report = shardkit.convert(str(image_tree), str(part), format=fmt, samples_per_shard=10,
                                  part=f"{index}/{count}", quiet=True)
        assert report.num_shards == 4          # 12 shards over 3 parts
        ds = shardkit.open_dataset(part, decode=None)
        assert len(ds) == 40 and ds.manifest.part["index"] == index
        parts.append(str(part))
    merged = tmp_path / "merged"
    result = CliRunner().invoke(main, ["merge", *reversed(parts), str(merged)])
    assert result.exit_code == 0, result.output
    assert "merged 3 parts: 120 samples in 12 shards" in result.output
    assert _digests(merged) == _digests(single)
    a = shardkit.open_dataset(single, decode=None)
    b = shardkit.open_dataset(merged, decode=None)
    assert [bytes(memoryview(a[i][0])) for i in range(len(a))] == [bytes(memoryview(b[i][0])) for i in range(len(b))]
    assert shardkit.verify(str(merged)).ok
    assert b.manifest.part is None and b.manifest.source["summary"]["converted"] == 120


def test_merge_refuses_incomplete_or_mixed_parts(image_tree: Path, tmp_path: Path) -> None:
    made = {}
    for name, part, per_shard in (("a0", "0/2", 10), ("a1", "1/2", 10), ("b1", "1/2", 20)):
        made[name] = tmp_path / name
        shardkit.convert(str(image_tree), str(made[name]), samples_per_shard=per_shard, part=part, quiet=True)
    runner = CliRunner()
    result = runner.invoke(main, ["merge", str(made["a0"]), str(tmp_path / "m1")])
    assert result.exit_code == 2 and "missing part(s) 1" in result.output
    result = runner.invoke(main, ["merge", str(made["a0"]), str(made["b1"]), str(tmp_path / "m2")])
    assert result.exit_code == 2 and "different conversion" in result.output
    result = runner.invoke(main, ["merge", str(made["a0"]), str(made["a0"]), str(tmp_path / "m3")])
    assert result.exit_code == 2 and "given twice" in result.output
    assert not (tmp_path / "m2" / "manifest.json").exists()


def test_more_parts_than_shards_gives_empty_valid_parts(image_tree: Path, tmp_path: Path) -> None:
    for index in range(3):
        shardkit.convert(str(image_tree), str(tmp_path / f"p{index}"), samples_per_shard=100,
                         part=f"{index}/3", quiet=True)
    sizes = [len(shardkit.open_dataset(tmp_path / f"p{index}")) for index in range(3)]
    assert sorted(sizes) == [0, 20, 100]
    report = shardkit.merge([str(tmp_path / f"p{index}") for index in range(3)], str(tmp_path / "all"))
    assert report.num_samples == 120


def test_merged_summary_and_skipped_list_equal_a_single_run(tmp_path: Path) -> None:
    """A tree with inputs skipped by the scan (broken links, a FIFO) and while writing (damaged
    images), cut into 3 parts: the merge counts each file and each skip once, as one run does."""
    from tests.faults.corpus import build_corpus
    corpus = build_corpus(tmp_path / "src")
    single = tmp_path / "single"
    shardkit.convert(str(corpus.root), str(single), samples_per_shard=4, quiet=True)
    parts = [tmp_path / f"part{index}" for index in range(3)]
    for index, part in enumerate(parts):
        shardkit.convert(str(corpus.root), str(part), samples_per_shard=4, part=f"{index}/3", quiet=True)
    merged = tmp_path / "merged"
    shardkit.merge([str(part) for part in parts], str(merged))
    one = shardkit.open_dataset(single).manifest.source["summary"]
    assert one["skipped"] >= 10 and shardkit.open_dataset(merged).manifest.source["summary"] == one
    lines = (single / "skipped.jsonl").read_bytes()
    assert lines.count(b"\n") == one["skipped"] and (merged / "skipped.jsonl").read_bytes() == lines
    assert _digests(merged) == _digests(single)
    # the damaged images are spread over the parts, so each part's own count is smaller
    assert all(shardkit.open_dataset(part).manifest.source["summary"]["skipped"] < one["skipped"] for part in parts)
