"""`convert NEW_SRC DST --append` of tables: a row is an input (key "file:line"), encoded with the
dataset's recorded encoding; collected vocabularies and classes grow at their end, so old shards
keep their bytes and old rows their codes; rows already in DST are skipped and reported, a key
with other content is refused; other columns are refused in one line; a kill -9 and a rerun give
the bytes of an uninterrupted append; an appended shard is repaired from its NEW_SRC.

Mutations caught here (each a one-line change): new vocabulary values sorted in among the old ones
(old rows' codes change); the column-set check left out (an extra column is appended silently); the
float-for-int check left out; held_items returning no rows (a file already in DST is appended again);
labels left out of the duplicate comparison (a row with another label is skipped as a duplicate); the
restriction to new rows dropped (rows already in DST written again); the old schema kept in the new
manifest (vocabulary not grown); a --schema vocabulary grown; repair opening an append's NEW_SRC
without the dataset's encoding; the manifest saved before the publish kill point."""
from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import shardkit
from shardkit.errors import ConversionError

from .helpers import EPOCH, assert_no_traceback, error_lines, run_cli, tree_bytes

HEADER = ["x", "n", "city", "label"]
OLD_ROWS = [[0.5 * i, i, ["Paris", "Berlin", "Rome"][i % 3], ["cat", "dog"][i % 2]] for i in range(30)]
#: Rows of the new table: a new city that sorts before the old ones, a new class after and one before.
NEW_ROWS = [[100.0 + i, 100 + i, ["Paris", "Athens", "Zurich"][i % 3], ["dog", "emu", "ant"][i % 3]]
            for i in range(9)]


def write_table(path: Path, rows: List[list], header: List[str] = HEADER) -> Path:
    """A CSV or Parquet table (by path's suffix) of these rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq
        pq.write_table(pa.table({name: [row[index] for row in rows] for index, name in enumerate(header)}), path)
    else:
        path.write_text("\n".join(",".join(map(str, row)) for row in [header] + rows) + "\n")
    return path


def rows_of(dst: Path) -> Dict[str, Tuple[bytes, int, object]]:
    """key -> (stored bytes, label, class name) of every row."""
    with shardkit.open_dataset(dst, decode=None, verify_checksums=True) as ds:
        return {ds.key(i): (bytes(ds[i][0]), int(ds[i][1]), ds.classes[int(ds[i][1])]) for i in range(len(ds))}


def _dataset(tmp_path: Path, kind: str, fmt: str = "hdf5") -> Tuple[Path, Path]:
    """DST converted from old.<kind> (10 rows a shard), and new.<kind>."""
    old = write_table(tmp_path / "old" / f"table.{kind}", OLD_ROWS)
    new = write_table(tmp_path / "new" / f"more.{kind}", NEW_ROWS)
    dst = tmp_path / "dst"
    shardkit.convert(old.parent, dst, format=fmt, label_column="label", samples_per_shard=10, workers=1)
    return dst, new


@pytest.mark.parametrize("kind", ["csv", "parquet"])
@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
def test_append_a_table_keeps_old_shards_and_encodes_new_rows_as_the_dataset(
        tmp_path: Path, kind: str, fmt: str) -> None:
    dst, new = _dataset(tmp_path, kind, fmt)
    before_shards, before = tree_bytes(dst / "shards"), rows_of(dst)
    before_manifest = json.loads((dst / "manifest.json").read_text())
    report = shardkit.convert(new.parent, dst, append=True, workers=1)
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["shards"][:3] == before_manifest["shards"]                         # same entries, sha256
    assert {name: data for name, data in tree_bytes(dst / "shards").items() if name in before_shards} == before_shards
    assert shardkit.verify(dst, mode="deep").ok
    after = rows_of(dst)
    assert {key: after[key] for key in before} == before                               # codes and labels unchanged
    assert manifest["classes"] == ["cat", "dog", "ant", "emu"]                         # grown at the end
    city = [column for column in manifest["schema"]["columns"] if column["name"] == "city"][0]
    assert city["vocabulary"] == ["Berlin", "Paris", "Rome", "Athens", "Zurich"]
    assert report.warnings == [
        "column 'city': 2 new values added at the end of its vocabulary (codes 3..4): 'Athens', 'Zurich'",
        "column 'label': 2 new classes added at the end (labels 2..3): 'ant', 'emu'"]
    alone = tmp_path / "alone"                          # the new table alone, with the dataset's (grown) encoding
    shardkit.convert(new, alone, format=fmt, label_column="label", schema_file=str(dst / "manifest.json"),
                     workers=1)
    expected = {f"more.{kind}:{key.split(':')[1]}": value for key, value in rows_of(alone).items()}
    assert {key: after[key] for key in after if key not in before} == expected
    assert len(expected) == len(NEW_ROWS)


@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_rows_already_in_dst_are_skipped_and_reported(tmp_path: Path, kind: str) -> None:
    """The same table appended twice adds nothing the second time; a folder holding the converted
    table (same name, same rows) and a new one adds only the new one's rows."""
    dst, new = _dataset(tmp_path, kind)
    shardkit.convert(new.parent, dst, append=True, workers=1)
    appended = tree_bytes(dst)
    again = shardkit.convert(new.parent, dst, append=True, workers=1)
    assert again.warnings == [f"{len(NEW_ROWS)} inputs already in DST (same key and content) were skipped",
                              "nothing new to append"]
    assert tree_bytes(dst) == appended
    landing = tmp_path / "landing"
    shutil.copytree(tmp_path / "old", landing)
    write_table(landing / f"third.{kind}", NEW_ROWS[:4])
    report = shardkit.convert(landing, dst, append=True, workers=1)
    assert report.warnings[0] == f"{len(OLD_ROWS)} inputs already in DST (same key and content) were skipped"
    with shardkit.open_dataset(dst, decode=None) as ds:
        keys = [ds.key(i) for i in range(len(ds))]
    assert len(keys) == len(OLD_ROWS) + len(NEW_ROWS) + 4 and len(set(keys)) == len(keys)
    assert sorted(key for key in keys if key.startswith("third")) == sorted(f"third.{kind}:{line}" for line in (
        range(2, 6) if kind == "csv" else range(1, 5)))


def test_a_row_with_other_content_under_a_key_in_dst_is_refused(tmp_path: Path) -> None:
    """Same file name, a row changed (its label only): the row's key names another sample; DST untouched."""
    dst, _ = _dataset(tmp_path, "csv")
    changed = [list(row) for row in OLD_ROWS] + [[9.0, 9, "Rome", "cat"]]
    changed[1][3] = "cat"
    write_table(tmp_path / "again" / "table.csv", changed)
    before = tree_bytes(dst)
    with pytest.raises(ConversionError, match=r"'table\.csv:3' is already in DST \(sample 1\) with other content"):
        shardkit.convert(tmp_path / "again", dst, append=True, workers=1)
    assert tree_bytes(dst) == before


def test_a_vocabulary_given_by_schema_stays_fixed(tmp_path: Path) -> None:
    """A vocabulary --schema gave is not grown: a new value makes its row bad, as in the conversion."""
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": [{"name": "city", "type": "category",
                                               "vocabulary": ["Berlin", "Paris", "Rome"]}]}))
    old = write_table(tmp_path / "old.csv", OLD_ROWS)
    dst = tmp_path / "dst"
    shardkit.convert(old, dst, label_column="label", schema_file=str(schema), workers=1)
    report = shardkit.convert(write_table(tmp_path / "new.csv", NEW_ROWS), dst, append=True, workers=1)
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["schema"]["columns"][2]["vocabulary"] == ["Berlin", "Paris", "Rome"]
    assert report.skipped == 6 and len(rows_of(dst)) == len(OLD_ROWS) + 3
    lines = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    assert lines[0] == {"path": str(tmp_path / "new.csv"), "line": 3,
                        "reason": "column 'city': 'Athens' is not in its vocabulary"}


@pytest.mark.parametrize("header, says", [
    (["x", "n", "city", "extra", "label"], "columns differ from the dataset's (extra 'extra')"),
    (["x", "city", "label"], "columns differ from the dataset's (missing 'n')"),
])
def test_other_columns_are_refused_in_one_line(tmp_path: Path, header: List[str], says: str) -> None:
    dst, _ = _dataset(tmp_path, "csv")
    rows = [[1.0, 2, "Rome", 7, "cat"][:len(header) - 1] + ["cat"]]
    new = write_table(tmp_path / "other" / "other.csv", rows, header)
    before = tree_bytes(dst)
    result = run_cli("convert", new, dst, "--append", "--quiet")
    assert result.returncode == 2
    assert_no_traceback(result)
    assert error_lines(result) == [f"error: {new}: {says}; an append takes tables of the dataset's columns "
                                   "(x, n, city)"]
    assert tree_bytes(dst) == before


def test_a_float_column_where_the_dataset_stores_int_is_refused(tmp_path: Path) -> None:
    dst, _ = _dataset(tmp_path, "parquet")
    new = write_table(tmp_path / "floats" / "f.parquet", [[1.0, 2.5, "Rome", "cat"]])
    result = run_cli("convert", new, dst, "--append", "--quiet")
    assert result.returncode == 2
    assert error_lines(result) == [f"error: {new}: column 'n' holds double values; the dataset stores it as "
                                   "int (an append keeps the dataset's column types)"]


@pytest.mark.parametrize("point", ["shard-written", "append-publish"])
def test_kill_9_during_a_table_append_then_rerun_is_byte_identical(tmp_path: Path, point: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH["SOURCE_DATE_EPOCH"])
    old = write_table(tmp_path / "old.csv", OLD_ROWS)
    new = write_table(tmp_path / "new" / "more.csv", NEW_ROWS * 3)
    reference, dst = tmp_path / "reference", tmp_path / "dst"
    for where in (reference, dst):
        shardkit.convert(old, where, label_column="label", samples_per_shard=10, workers=1)
    assert run_cli("convert", new.parent, reference, "--append", "--quiet", env_extra=EPOCH).returncode == 0
    before = tree_bytes(dst)
    key = str(dst / ".shardkit" / "append" / "shards" / "shard-00004.h5") if point == "shard-written" else str(dst)
    marker = tmp_path / "killed"
    killed = run_cli("convert", new.parent, dst, "--append", "--quiet",
                     env_extra={**EPOCH, "SHARDKIT_TEST_KILL_AT": f"{point}:{key}:{marker}"})
    assert killed.returncode == -signal.SIGKILL and marker.exists()
    assert json.loads((dst / "manifest.json").read_bytes()) == json.loads(before["manifest.json"])
    assert {name: data for name, data in tree_bytes(dst, skip=(".shardkit",)).items() if name in before} == before
    assert len(shardkit.open_dataset(dst)) == len(OLD_ROWS)
    rerun = run_cli("convert", new.parent, dst, "--append", "--quiet", env_extra=EPOCH)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_bytes(dst) == tree_bytes(reference)                 # as an uninterrupted append: byte for byte


def test_repair_rebuilds_an_appended_table_shard_from_its_new_src(tmp_path: Path) -> None:
    dst, new = _dataset(tmp_path, "csv")
    shardkit.convert(new.parent, dst, append=True, workers=1)
    expected = tree_bytes(dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    (dst / manifest["shards"][-1]["path"]).unlink()
    (dst / manifest["shards"][0]["path"]).write_bytes(b"damaged")
    assert shardkit.repair(dst, [tmp_path / "old", new.parent]).shards_written == 2
    assert tree_bytes(dst) == expected


@pytest.mark.parametrize("damage_old_table", [False, True])
def test_the_appended_sample_table_is_the_shards_own_tables(tmp_path: Path, damage_old_table: bool) -> None:
    """The new table joins the old dataset's table and the staged shards' (no shard opened), each
    copied only after its sha256 matched; an old table that does not match (an append of new files
    reads no old row) is rebuilt from the shards instead. Mutation: copying the old table without
    comparing its sha256 fails the damaged case."""
    from shardkit.manifest import load_manifest
    from shardkit.writing.table_writer import write_sample_table
    dst = tmp_path / "dst"
    shardkit.convert(write_table(tmp_path / "old" / "a.csv", OLD_ROWS), dst, label_column="label",
                     samples_per_shard=8, workers=1)
    if damage_old_table:
        table = dst / "sample_table.bin"
        data = bytearray(table.read_bytes())
        data[0] ^= 0x01                         # the first label
        table.write_bytes(bytes(data))
    shardkit.convert(write_table(tmp_path / "new" / "b.csv", NEW_ROWS), dst, append=True, workers=1)
    manifest = load_manifest(dst)
    rebuilt = write_sample_table(str(dst), manifest, "rebuilt.bin")
    assert rebuilt is not None and manifest.sample_table is not None
    assert (dst / manifest.sample_table["path"]).read_bytes() == (dst / "rebuilt.bin").read_bytes()
    assert rebuilt["sha256"] == manifest.sample_table["sha256"]
