"""The dataset's sample table (DST/sample_table.bin): written by convert and merge from the shards'
own tables, read instead of them, and never trusted beyond them: a table that differs from a shard,
is cut short, or is a link is reported naming the file, by readers and by verify."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch.utils.data

import shardkit
from shardkit.errors import CorruptShardError, ManifestError
from shardkit.manifest import load_manifest
from shardkit.sample_table import ROW_DTYPE, TABLE_NAME

ROWS = 60


def _table_csv(tmp_path: Path) -> "tuple[Path, np.ndarray]":
    rows = np.random.default_rng(5).random((ROWS, 3)).astype(np.float32)
    csv = tmp_path / "src.csv"
    lines = [f"{float(a)!r},{float(b)!r},{float(c)!r},{i % 4}\n" for i, (a, b, c) in enumerate(rows)]
    csv.write_text("a,b,c,label\n" + "".join(lines))
    return csv, rows


@pytest.fixture
def table_dataset(tmp_path: Path, fmt: str) -> "tuple[Path, np.ndarray]":
    csv, rows = _table_csv(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=7, quiet=True)
    return dst, rows


def _table(dst: Path) -> np.ndarray:
    return np.frombuffer((dst / TABLE_NAME).read_bytes(), dtype=ROW_DTYPE)


def test_convert_writes_every_label_and_crc32_in_index_order(table_dataset: "tuple[Path, np.ndarray]") -> None:
    dst, rows = table_dataset
    table = _table(dst)
    assert table["label"].tolist() == [i % 4 for i in range(ROWS)]
    assert table["crc32"].tolist() == [zlib.crc32(row.tobytes()) for row in rows]
    entry = json.loads((dst / "manifest.json").read_text())["sample_table"]
    assert entry["path"] == TABLE_NAME and entry["size"] == ROWS * ROW_DTYPE.itemsize


def test_reads_through_the_table_equal_reads_through_the_shards(table_dataset: "tuple[Path, np.ndarray]") -> None:
    dst, rows = table_dataset
    untabled = load_manifest(dst)
    untabled.sample_table = None
    order = np.random.default_rng(1).permutation(ROWS).tolist()
    with shardkit.open_dataset(dst, decode=None, verify_checksums=True) as ds, \
            type(ds)(dst, decode=None, verify_checksums=True, _manifest=untabled) as plain:
        got = [ds[i] for i in order]
        assert ds.shard_cache.table is not None and plain.shard_cache.table is None
        assert ds.shard_cache.info().placed and not plain.shard_cache.info().placed     # rows only with a table
        expected = [plain[i] for i in order]
        assert [label for _, label in got] == [label for _, label in expected] == [i % 4 for i in order]
        assert np.array_equal(np.stack([np.asarray(p) for p, _ in got]), rows[order])
        batch = ds.__getitems__(order[:20])
        assert [label for _, label in batch] == [i % 4 for i in order[:20]]
        assert np.array_equal(np.stack([np.asarray(p) for p, _ in batch]), rows[order[:20]])


def test_dataloader_workers_map_the_table_themselves(table_dataset: "tuple[Path, np.ndarray]") -> None:
    dst, rows = table_dataset
    ds = shardkit.open_dataset(dst, decode="tensor")
    ds[0]
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.shard_cache.table is None and clone[3][1] == 3
    loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2)
    labels = torch.cat([batch[1] for batch in loader]).tolist()
    assert labels == [i % 4 for i in range(ROWS)]


def test_a_table_that_differs_from_its_shard_is_refused_naming_both(table_dataset: "tuple[Path, np.ndarray]") -> None:
    dst, _ = table_dataset
    path = dst / TABLE_NAME
    data = bytearray(path.read_bytes())
    data[ROW_DTYPE.itemsize * 30] ^= 0x01          # sample 30's label, in shard 4 (7 samples a shard)
    path.write_bytes(bytes(data))
    with shardkit.open_dataset(dst, decode=None) as ds:
        assert ds[0][1] == 0                        # another shard still reads
        with pytest.raises(CorruptShardError, match=r"shard-00004.*labels differ.*sample_table\.bin"):
            ds[30]
        with pytest.raises(CorruptShardError, match="labels differ"):
            ds[29]                                  # the whole shard, not only the flipped row
    report = shardkit.verify(str(dst), mode="full", workers=1)
    found = {(problem.kind, problem.shard) for problem in report.problems}
    assert found == {("table", None), ("table", ds.manifest.shards[4].path)}, report.problems
    assert shardkit.verify(str(dst), mode="quick", workers=1).ok      # quick checks the size only


@pytest.mark.parametrize("block_rows", [7, 1 << 18])
def test_targets_come_from_the_table_only_while_its_sha256_matches(
        table_dataset: "tuple[Path, np.ndarray]", monkeypatch: pytest.MonkeyPatch, block_rows: int) -> None:
    dst, _ = table_dataset
    monkeypatch.setattr("shardkit.sample_table._BLOCK_ROWS", block_rows)    # several blocks, or one
    with shardkit.open_dataset(dst, decode=None) as ds:
        assert ds.targets().tolist() == [i % 4 for i in range(ROWS)]
        info = ds.shard_cache.info()
        assert not info.open and not info.placed    # no shard was opened for them
        data = bytearray((dst / TABLE_NAME).read_bytes())
        data[ROW_DTYPE.itemsize * 3] ^= 0x02
        (dst / TABLE_NAME).write_bytes(bytes(data))
        with pytest.raises(CorruptShardError, match=r"sample_table\.bin.*sha256"):
            ds.targets()


def test_a_manifest_claiming_a_huge_table_allocates_nothing_for_it(table_dataset: "tuple[Path, np.ndarray]") -> None:
    """A resealed manifest may claim 10**12 samples and a table to match (and a last shard large
    enough to hold them, so that the manifest's own bounds pass): the table file's real size is
    checked before anything is sized from the claim."""
    from tests.faults.crafting import forge_manifest
    dst, _ = table_dataset
    extra = 10 ** 12

    def claim(data: dict) -> None:
        data["shards"][-1]["num_samples"] += extra
        data["shards"][-1]["size"] += extra * 1024
        data["num_samples"] += extra
        data["sample_table"]["size"] += extra * ROW_DTYPE.itemsize
    forge_manifest(dst, claim)
    with shardkit.open_dataset(dst, decode=None) as ds, pytest.raises(CorruptShardError, match="truncated"):
        ds.targets()


def test_a_consistent_looking_but_wrong_table_is_caught_by_verify(table_dataset: "tuple[Path, np.ndarray]") -> None:
    """A table rewritten with its manifest hash recomputed still differs from the shards: full verify
    compares them, not only the hashes."""
    dst, _ = table_dataset
    table = _table(dst).copy()
    table["crc32"][8] ^= 1
    (dst / TABLE_NAME).write_bytes(table.tobytes())
    manifest = load_manifest(dst)
    assert manifest.sample_table is not None
    import hashlib
    manifest.sample_table["sha256"] = hashlib.sha256(table.tobytes()).hexdigest()
    manifest.save(dst)
    report = shardkit.verify(str(dst), mode="full", workers=1)
    assert [(problem.kind, "CRC32s differ" in problem.message) for problem in report.problems] == [("table", True)]
    with shardkit.open_dataset(dst, decode=None) as ds, pytest.raises(CorruptShardError, match="CRC32s differ"):
        ds[8]


@pytest.mark.parametrize("damage", ["truncate", "remove", "link_out"])
def test_a_missing_short_or_linked_table_is_refused(table_dataset: "tuple[Path, np.ndarray]", tmp_path: Path,
                                                    damage: str) -> None:
    dst, _ = table_dataset
    path = dst / TABLE_NAME
    if damage == "truncate":
        os.truncate(path, 100)
    elif damage == "remove":
        path.unlink()
    else:
        outside = tmp_path / "outside.bin"
        shutil.move(str(path), outside)
        path.symlink_to(outside)
    expected = {"truncate": "truncated", "remove": "sample table is missing", "link_out": "symbolic link"}[damage]
    with shardkit.open_dataset(dst, decode=None) as ds, pytest.raises(CorruptShardError, match=expected):
        ds[0]
    report = shardkit.verify(str(dst), mode="quick", workers=1)
    assert [problem.kind for problem in report.problems] == ["table"]
    assert TABLE_NAME in report.problems[0].message and expected in report.problems[0].message


@pytest.mark.parametrize("entry", [{"path": "../outside.bin"}, {"size": 13}, {"sha256": "x" * 64}, {"extra": 1}])
def test_a_manifest_entry_other_than_the_table_is_a_manifest_error(
        table_dataset: "tuple[Path, np.ndarray]", entry: dict) -> None:
    dst, _ = table_dataset
    manifest = load_manifest(dst)
    assert manifest.sample_table is not None
    manifest.sample_table.update(entry)
    manifest.save(dst)
    with pytest.raises(ManifestError, match="sample_table"):
        load_manifest(dst)


def test_lmdb_image_records_keep_their_crc32s_and_write_no_table(image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    shardkit.convert(str(image_tree), str(dst), format="hdf5", quiet=True)
    assert (dst / TABLE_NAME).is_file()
    shardkit.convert(str(image_tree), str(dst), format="lmdb", quiet=True, overwrite=True)
    assert not (dst / TABLE_NAME).exists()          # the older dataset's table went with it
    assert load_manifest(dst).sample_table is None
    with shardkit.open_dataset(dst, decode=None, verify_checksums=True) as ds:
        assert len({ds[i][1] for i in range(len(ds))}) > 1


def test_merged_parts_write_the_same_table_as_one_run(tmp_path: Path, fmt: str) -> None:
    csv, _ = _table_csv(tmp_path)
    options = dict(format=fmt, label_column="label", samples_per_shard=7, quiet=True, order="shuffled", seed=3)
    shardkit.convert(str(csv), str(tmp_path / "whole"), **options)
    parts = []
    for index in range(3):
        parts.append(str(tmp_path / f"part{index}"))
        shardkit.convert(str(csv), parts[-1], part=f"{index}/3", **options)
    shardkit.merge(parts, str(tmp_path / "merged"))
    whole = (tmp_path / "whole" / TABLE_NAME).read_bytes()
    assert (tmp_path / "merged" / TABLE_NAME).read_bytes() == whole
    assert load_manifest(tmp_path / "merged").sample_table == load_manifest(tmp_path / "whole").sample_table
    assert shardkit.verify(str(tmp_path / "merged"), mode="full", workers=1).ok
