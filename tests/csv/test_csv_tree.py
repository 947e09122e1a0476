"""Folders of CSV files: sorted recursive order, shared headers, gzip, planning and determinism."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

import shardkit
from shardkit.options import RunOptions
from shardkit.sources import open_source


def _tree(root: Path, make_csv) -> Path:
    make_csv("tree/b/part2.csv", ["x", "y", "label"], [[i, -i, "dog"] for i in range(20, 30)])
    make_csv("tree/a.csv", ["x", "y", "label"], [[i, -i, "cat"] for i in range(0, 13)])
    make_csv("tree/b/part10.csv", ["x", "y", "label"], [[i, -i, "emu"] for i in range(13, 20)])
    (root / "tree" / "README.txt").write_text("not a csv")
    return root / "tree"


def test_folder_rows_follow_sorted_paths_and_shards_span_files(tmp_path, make_csv, convert_csv, fmt):
    tree = _tree(tmp_path, make_csv)
    ds = convert_csv(tree, fmt, label_column="label", samples_per_shard=8)
    assert [int(ds[i][0][0]) for i in range(len(ds))] == list(range(13)) + list(range(13, 20)) + list(range(20, 30))
    assert ds.classes == ["cat", "dog", "emu"]
    assert [entry.num_samples for entry in ds.manifest.shards] == [8, 8, 8, 6]
    summary = ds.manifest.source["summary"]
    assert ds.manifest.source["kind"] == "csv"
    assert (summary["csv_files"], summary["rows"], summary["converted"]) == (3, 30, 30)
    assert shardkit.verify(ds.root).ok


def test_shard_size_bounds_the_stored_bytes(tmp_path, make_csv, convert_csv, fmt):
    src = make_csv("s.csv", [f"c{i}" for i in range(10)] + ["label"], [[i] * 10 + [0] for i in range(3000)])
    ds = convert_csv(src, fmt, label_column="label", shard_size="60KB")
    counts = [entry.num_samples for entry in ds.manifest.shards]     # 40 payload bytes per row, and tables
    assert len(counts) > 2 and len(set(counts[:-1])) == 1 and sum(counts) == 3000
    assert max(entry.size for entry in ds.manifest.shards) <= 60_000


def test_different_headers_are_refused_naming_both_files_unless_columns_pick_common_ones(
        tmp_path, make_csv, convert_csv, fmt):
    make_csv("mix/1.csv", ["x", "y", "label"], [[1, 2, 0]])
    make_csv("mix/2.csv", ["y", "z", "x", "label"], [[5, 6, 7, 1]])
    with pytest.raises(shardkit.SourceError, match=r"2\.csv: header differs from 1\.csv"):
        shardkit.convert(str(tmp_path / "mix"), str(tmp_path / "d"), label_column="label", quiet=True)
    ds = convert_csv(tmp_path / "mix", fmt, label_column="label", columns=["x", "y"])
    assert [ds[i][0].tolist() for i in range(2)] == [[1.0, 2.0], [7.0, 5.0]]
    with pytest.raises(shardkit.UsageError, match=r"1\.csv: no column 'z'"):
        shardkit.convert(str(tmp_path / "mix"), str(tmp_path / "d2"), label_column="label", columns=["z"],
                         quiet=True)


def test_gzip_files_and_unreadable_files_in_a_folder(tmp_path, make_csv, convert_csv, read_skipped, fmt):
    make_csv("gz/a.csv", ["x", "label"], [[i, i % 2] for i in range(50)])
    with gzip.open(tmp_path / "gz" / "b.csv.gz", "wb") as handle:
        handle.write(b"x,label\n" + b"".join(f"{i},1\n".encode() for i in range(50, 90)))
    (tmp_path / "gz" / "c.csv").write_bytes(b"\x00\x01\x02binary\x00")
    (tmp_path / "gz" / "d.csv").write_bytes(b"")
    ds = convert_csv(tmp_path / "gz", fmt, label_column="label", samples_per_shard=16)
    assert [int(ds[i][0][0]) for i in range(len(ds))] == list(range(90))
    assert [(entry["path"], entry["reason"].split(" (")[0]) for entry in read_skipped(ds.root)] == [
        ("c.csv", "binary content"), ("d.csv", "empty file")]
    with pytest.raises(shardkit.ConversionError, match="c.csv:1: binary content"):
        shardkit.convert(str(tmp_path / "gz"), str(tmp_path / "d2"), label_column="label", on_error="fail",
                         quiet=True)
    assert not (tmp_path / "d2" / "manifest.json").exists()


def test_workers_give_byte_identical_shards(tmp_path, make_csv):
    rows = [[i, f"w{i % 17}", f"t{i}", i % 3] for i in range(3000)]
    src = make_csv("big.csv", ["n", "word", "note", "label"], rows)
    hashes = []
    for workers in (1, 2):
        dst = tmp_path / f"w{workers}"
        shardkit.convert(str(src), str(dst), label_column="label", text_columns=["note"], samples_per_shard=400,
                         workers=workers, quiet=True)
        manifest = json.loads((dst / "manifest.json").read_text())
        hashes.append([entry["sha256"] for entry in manifest["shards"]])
    assert len(hashes[0]) == 8 and hashes[0] == hashes[1]


def test_fingerprint_follows_file_changes_and_resume_refuses_them(tmp_path, make_csv):
    src = make_csv("f.csv", ["x", "label"], [[1, 0], [2, 1]])
    options = {"label_column": "label"}
    before = open_source(str(src), options, RunOptions(quiet=True)).fingerprint()
    assert open_source(str(src), options, RunOptions(quiet=True)).fingerprint() == before
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), label_column="label", quiet=True)
    assert shardkit.convert(str(src), str(dst), label_column="label", resume=True, quiet=True).num_samples == 2
    os.utime(src, ns=(1, 1))
    assert open_source(str(src), options, RunOptions(quiet=True)).fingerprint() != before
    with pytest.raises(shardkit.UsageError, match="made from other input or options"):
        shardkit.convert(str(src), str(dst), label_column="label", resume=True, quiet=True)


def test_folder_dispatch_rule(tmp_path, make_csv, image_tree):
    make_csv("only/x.csv", ["a", "label"], [[1, 0]])
    assert open_source(str(tmp_path / "only"), {"label_column": "label"}, RunOptions()).kind == "csv"
    assert open_source(str(image_tree), {}, RunOptions()).kind == "image_tree"
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(shardkit.UsageError, match="csv.gz file"):
        open_source(str(tmp_path / "notes.txt"), {}, RunOptions())


def test_a_folder_of_header_only_files_is_empty(tmp_path, make_csv):
    make_csv("h/a.csv", ["x", "label"], [])
    make_csv("h/b.csv", ["x", "label"], [])
    with pytest.raises(shardkit.EmptySourceError, match="hold no data rows"):
        shardkit.convert(str(tmp_path / "h"), str(tmp_path / "d"), label_column="label", quiet=True)
