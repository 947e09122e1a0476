"""A tree of CSV files with string columns is parsed file by file, in worker processes with
--workers > 1: the dataset must be the same as with one process, and a failure or the
vocabulary limit must stop the scan cleanly."""
from __future__ import annotations

import gzip
import hashlib
import os
import random
from pathlib import Path
from typing import Dict

import pytest

import shardkit
from shardkit.errors import SourceError
from shardkit.sources.tabular.spill import PREFIX

from .conftest import write_rows


def _tree(root: Path, files: int = 4, rows: int = 700) -> Path:
    """Files whose categories and classes differ (each sees a different subset), with a text
    column, missing values and some bad rows."""
    rng = random.Random(11)
    for number in range(files):
        colours = [f"colour{k}" for k in range(number, number + 3)] + ["NA"]
        classes = ["zebra", "ant", "moose", "cat"][: number + 1]
        body = []
        for index in range(rows):
            row = [f"{rng.uniform(-5, 5):.3f}", rng.choice(colours), rng.choice(["a, b", "c\nd", "é"]),
                   rng.choice(classes)]
            if index % 97 == 13:
                row = row[:3]
            body.append(row)
        write_rows(root / f"part{number}" / "rows.csv", ["x", "colour", "note", "label"], body)
    return root


def _assert_no_spill_left(spill_home: Path) -> None:
    """Nothing in this test's temporary directory, and nothing of this process in the system's
    (workers must use the scan's directory, not their own default)."""
    assert list(spill_home.iterdir()) == []
    system = Path(os.environ.get("TMPDIR") or "/tmp")
    assert not list(system.glob(f"{PREFIX}{os.getpid()}-*")), "a worker spilled outside the scan's directory"


def _shards(dst: Path) -> Dict[str, str]:
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted((dst / "shards").iterdir())}


def test_workers_parse_files_into_the_same_dataset(spill_home: Path, tmp_path: Path, fmt: str) -> None:
    src = _tree(tmp_path / "src")
    options = dict(format=fmt, label_column="label", text_columns=["note"], samples_per_shard=300, quiet=True)
    shardkit.convert(src, tmp_path / "one", workers=1, **options)
    shardkit.convert(src, tmp_path / "three", workers=3, **options)
    assert _shards(tmp_path / "three") == _shards(tmp_path / "one")
    assert (tmp_path / "three" / "skipped.jsonl").read_bytes() == (tmp_path / "one" / "skipped.jsonl").read_bytes()
    ds = shardkit.open_dataset(tmp_path / "three")
    assert ds.vocabularies["colour"] == [f"colour{k}" for k in range(6)]      # the union, sorted
    assert ds.classes == ["ant", "cat", "moose", "zebra"]
    _assert_no_spill_left(spill_home)


def test_a_file_that_fails_mid_scan_stops_every_worker_and_leaves_nothing(spill_home: Path, tmp_path: Path) -> None:
    src = _tree(tmp_path / "src", files=3, rows=3000)
    broken = src / "part1" / "rows.csv"
    data = gzip.compress(broken.read_bytes() * 20)
    broken.unlink()
    (src / "part1" / "rows.csv.gz").write_bytes(data[: len(data) // 2])      # ends mid-stream
    with pytest.raises(SourceError, match=r"part1/rows\.csv\.gz: read failed"):
        shardkit.convert(src, tmp_path / "dst", label_column="label", workers=2, quiet=True)
    _assert_no_spill_left(spill_home)
    assert not (tmp_path / "dst").exists()


def test_too_many_categories_over_all_files_is_refused(spill_home: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    for number in range(2):                   # 40,000 values each: within the limit per file, not together
        write_rows(src / f"f{number}.csv", ["x", "city", "label"],
                   [[index, f"city{number}-{index}", index % 2] for index in range(40_000)])
    with pytest.raises(SourceError, match=r"column 'city' has more than 65536 distinct values"):
        shardkit.convert(src, tmp_path / "dst", label_column="label", workers=2, quiet=True)
    _assert_no_spill_left(spill_home)


def test_one_large_file_is_split_in_parts_that_give_the_same_dataset(spill_home: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from shardkit.sources.tabular import split
    from shardkit.sources.tabular.files import TableFile, read_head
    rows = [[f"{index % 89}.5", f"colour{index % 7}", "\n".join(["line"] * (index % 12)), f"c{index % 3}"]
            for index in range(3000)]                          # most newlines are inside quotes
    src = write_rows(tmp_path / "src" / "rows.csv", ["x", "colour", "note", "label"], rows)
    with open(src, "a", encoding="utf-8") as handle:           # bad rows in the later parts too
        handle.write("1.5,colour0,\"quoted\nnewline\",zebra\n1,2\n")
    monkeypatch.setattr(split, "MIN_PART_BYTES", 20_000)
    item = TableFile(str(src), "rows.csv", src.stat().st_size, 0, "text", read_head(str(src), None))
    parts = split.split_file(item, 3)
    assert len(parts) == 3 and parts[0].head.data_offset == item.head.data_offset and parts[-1].stop is None
    options = dict(label_column="label", text_columns=["note"], samples_per_shard=700, quiet=True)
    shardkit.convert(src, tmp_path / "one", workers=1, **options)
    shardkit.convert(src, tmp_path / "three", workers=3, **options)
    assert _shards(tmp_path / "three") == _shards(tmp_path / "one")
    skipped = (tmp_path / "three" / "skipped.jsonl").read_bytes()
    assert skipped == (tmp_path / "one" / "skipped.jsonl").read_bytes()
    last = src.read_bytes().count(b"\n")
    assert f'"line": {last}, '.encode() in skipped       # the file's last line, in its last part
    _assert_no_spill_left(spill_home)
