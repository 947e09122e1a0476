"""Tables with string columns are parsed once: the scan spills the parsed rows to temporary files,
and the shards are cut from them. The spill must give back exactly what was written, leave
nothing behind, and give the same shards however it is read."""
from __future__ import annotations

import hashlib
import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import shardkit
from shardkit.sources.tabular.encode import OpenCodes
from shardkit.errors import ConversionError, EmptySourceError
from shardkit.sources.tabular import source as csv_table
from shardkit.sources.tabular.spill import PREFIX, Spill, remove_orphans, spill_prefix

from .conftest import write_rows


def _mixed_csv(path: Path, rows: int, seed: int = 0) -> Path:
    """Numbers, a category with quoted commas and missing values, a free-text column, a class label,
    and some bad rows (ragged, not a number, missing label)."""
    rng = random.Random(seed)
    body = []
    for index in range(rows):
        row = [f"{rng.uniform(-9, 9):.4f}", rng.choice(["red", "green", "blue, dark", "NA", ""]),
               rng.choice(["plain", "with \"quotes\"", "two\nlines", "ünïcode"]), rng.choice(["cat", "dog"])]
        if index % 53 == 7:
            row = row[:2]
        elif index % 61 == 3:
            row[0] = "n/a?"
        elif index % 67 == 5:
            row[3] = ""
        body.append(row)
    return write_rows(path, ["x", "colour", "note", "label"], body)


def test_spill_gives_back_every_range_exactly(spill_home: Path) -> None:
    spill = Spill("float32", 3, texts=True)
    rng = np.random.default_rng(0)
    vectors, labels, tails, bad = [], [], [], {}
    for _ in range(5):                                  # appends of different sizes, one empty
        count = int(rng.integers(0, 40))
        block = rng.standard_normal((count, 3)).astype(np.float32)
        block_labels = rng.integers(0, 9, count)
        block_tails = [bytes(rng.integers(0, 256, int(rng.integers(0, 12)), dtype=np.uint8)) for _ in range(count)]
        block_bad = {int(i): (1000 + len(vectors) + int(i), f"reason {len(vectors) + int(i)} ü")
                     for i in rng.choice(count, size=min(count, 3), replace=False)} if count else {}
        spill.append(block, block_labels, block_tails, block_bad)
        bad.update({len(vectors) + i: value for i, value in block_bad.items()})
        vectors.extend(block)
        labels.extend(block_labels.tolist())
        tails.extend(block_tails)
    spill.finish()
    total = len(vectors)
    assert spill.rows == total
    for start, stop in [(0, total), (0, 1), (total - 1, total), (5, 5)] + \
            [tuple(sorted(rng.integers(0, total + 1, 2).tolist())) for _ in range(20)]:
        rows = spill.read(start, stop)
        assert np.array_equal(rows.vectors, np.array(vectors[start:stop]).reshape(-1, 3))
        assert rows.labels.tolist() == labels[start:stop]
        assert rows.tails == tails[start:stop]
        assert rows.bad == {row - start: bad[row] for row in range(start, stop) if row in bad}
    folder = Path(spill.folder)
    assert folder.parent == spill_home and folder.name.startswith(f"{PREFIX}")
    spill.remove()
    assert not folder.exists()


def test_open_codes_rank_first_seen_ids_into_the_sorted_vocabulary() -> None:
    codes = OpenCodes()
    first = codes.codes(["pear", "apple", "NA", "fig", "apple"])
    second = codes.codes(["zucchini", " null ", "banana", "pear"])
    assert sorted(codes.names) == ["apple", "banana", "fig", "pear", "zucchini"]
    ranks = codes.ranks(sorted(codes.names))
    assert ranks[first].tolist() == [3, 0, -1, 2, 0]
    assert ranks[second].tolist() == [4, -1, 1, 3]


def test_conversions_leave_no_spill_folder(spill_home: Path, tmp_path: Path) -> None:
    src = _mixed_csv(tmp_path / "mixed.csv", 600)
    for workers in (1, 2):
        shardkit.convert(src, tmp_path / f"ok{workers}", label_column="label", text_columns=["note"],
                         samples_per_shard=100, workers=workers, quiet=True)
        assert list(spill_home.iterdir()) == []
    with pytest.raises(ConversionError):
        shardkit.convert(src, tmp_path / "fail", label_column="label", on_error="fail", quiet=True)
    assert list(spill_home.iterdir()) == []
    header_only = write_rows(tmp_path / "empty.csv", ["x", "colour", "label"], [])
    with pytest.raises(EmptySourceError):
        shardkit.convert(header_only, tmp_path / "empty", label_column="label", quiet=True)
    assert list(spill_home.iterdir()) == []


def test_read_block_size_does_not_change_the_shards(spill_home: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    src = _mixed_csv(tmp_path / "mixed.csv", 900, seed=3)

    def shards(dst: Path) -> dict:
        shardkit.convert(src, dst, format=fmt, label_column="label", text_columns=["note"], samples_per_shard=250,
                         quiet=True)
        return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
                for path in sorted((dst / "shards").iterdir())}

    whole = shards(tmp_path / "whole")
    monkeypatch.setattr(csv_table, "SPILL_BLOCK", 7)
    assert shards(tmp_path / "blocks") == whole
    ds = shardkit.open_dataset(tmp_path / "blocks", as_dict=True)
    assert len(ds) == 900 - len((tmp_path / "blocks" / "skipped.jsonl").read_text().splitlines())
    assert {ds[i]["note"] for i in range(len(ds))} == {"plain", "with \"quotes\"", "two\nlines", "ünïcode"}


def test_folders_of_dead_processes_are_removed(tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                           text=True, check=True)
    dead = tmp_path / f"{spill_prefix(int(ended.stdout), 'abc')}x1"
    live = tmp_path / f"{spill_prefix(os.getpid(), 'def')}x2"
    other = tmp_path / "unrelated-123"
    elsewhere = tmp_path / f"{PREFIX}{int(ended.stdout)}.0badc0de-abc-x3"   # another pid namespace or host
    unplaced = tmp_path / f"{PREFIX}{int(ended.stdout)}-abc-x4"              # no pid space in its name
    for folder in (dead, live, other, elsewhere, unplaced):
        folder.mkdir()
        (folder / "rows.bin").write_bytes(b"x")
    assert remove_orphans(str(tmp_path)) == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists() and elsewhere.exists() and unplaced.exists()
