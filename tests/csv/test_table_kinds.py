"""Every input kind — CSV/TSV (plain, gzip, bz2, zstd), JSON Lines, Parquet, Arrow IPC/Feather —
gives back the values written into it: numbers exactly as float32, nulls as NaN or code -1,
strings (with quotes, delimiters, newlines) through sorted vocabularies."""
from __future__ import annotations

import csv
import io
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit

KINDS = ["data.csv", "data.tsv", "data.csv.gz", "data.csv.bz2", "data.tsv.zst", "data.jsonl", "data.ndjson.gz",
         "data.parquet", "data.feather", "data.arrow"]
FLOAT32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
WORD = st.text(st.sampled_from(list("ab,;\t\"\n\r é'")), max_size=6).map(lambda text: "s" + text)


def write_table(path: Path, columns: Dict[str, List[Any]]) -> Path:
    """The columns written in the file kind its name says (None: null / empty field)."""
    table = pa.table({name: pa.array(values, type=pa.float32() if name.startswith("f") else None)
                      for name, values in columns.items()})
    name = path.name
    if name.endswith(".parquet"):
        pq.write_table(table, path, row_group_size=7)
    elif name.endswith((".feather", ".arrow")):
        feather.write_feather(table, str(path), compression="uncompressed", chunksize=5)
    elif ".jsonl" in name or ".ndjson" in name:
        text = "".join(json.dumps(row) + "\n" for row in table.to_pylist())
        _write_compressed(path, text.encode())
    else:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, delimiter="\t" if ".tsv" in name else ",")
        writer.writerow(list(columns))
        for row in table.to_pylist():
            writer.writerow(["" if value is None else repr(value) if isinstance(value, float) else value
                             for value in row.values()])
        _write_compressed(path, buffer.getvalue().encode())
    return path


def _write_compressed(path: Path, data: bytes) -> None:
    with pa.CompressedOutputStream(str(path), _compression(path.name)) if _compression(path.name) else \
            open(path, "wb") as handle:
        handle.write(data)


def _compression(name: str) -> Any:
    return {"gz": "gzip", "bz2": "bz2", "zst": "zstd"}.get(name.rsplit(".", 1)[-1])


def _check(ds: Any, columns: Dict[str, List[Any]]) -> None:
    rows = [ds[index] for index in range(len(ds))]
    assert len(rows) == len(columns["label"])
    for name, values in columns.items():
        got = [row[name] for row in rows]
        if name == "label":
            assert got == values
        elif name.startswith("f"):
            expected = np.array([math.nan if value is None else value for value in values], dtype=np.float32)
            assert np.array_equal(np.array(got, dtype=np.float32), expected, equal_nan=True)
        elif name.startswith("n"):
            assert [None if math.isnan(value) else int(value) for value in map(float, got)] == values
        else:
            vocabulary = ds.vocabularies[name]
            assert vocabulary == sorted({value for value in values if value is not None})
            assert [vocabulary[code] if code >= 0 else None for code in got] == values


@settings(max_examples=12, deadline=None)
@given(data=st.data(), kind=st.sampled_from(KINDS))
def test_values_come_back_from_every_input_kind(data: Any, kind: str) -> None:
    count = data.draw(st.integers(1, 25))
    columns = {"f0": data.draw(st.lists(st.one_of(st.none(), FLOAT32), min_size=count, max_size=count)),
               "n0": data.draw(st.lists(st.one_of(st.none(), st.integers(-10 ** 6, 10 ** 6)), min_size=count,
                                        max_size=count)),
               "s0": [data.draw(WORD)] + data.draw(st.lists(st.one_of(st.none(), WORD),
                                                            min_size=count - 1, max_size=count - 1)),
               "label": data.draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))}
    folder = Path(tempfile.mkdtemp())
    try:
        src = write_table(folder / kind, columns)
        shardkit.convert(str(src), str(folder / "dst"), label_column="label", samples_per_shard=6, quiet=True)
        _check(shardkit.open_dataset(str(folder / "dst"), as_dict=True), columns)
    finally:
        shutil.rmtree(folder)


def test_every_kind_gives_the_same_samples(tmp_path: Path) -> None:
    """Every kind of table file gives the same stored rows and labels (the shard bytes differ only
    by each sample's key, which names its file)."""
    columns = {"f0": [1.5, None, -2.25, 3e-8], "n0": [1, 2, 3, -4], "s0": ["sx", "s,y", None, "sx"],
               "label": [0, 1, 0, 1]}
    digests = set()
    for kind in KINDS:
        dst = tmp_path / f"dst-{kind}"
        shardkit.convert(str(write_table(tmp_path / kind, columns)), str(dst), label_column="label", quiet=True)
        manifest = json.loads((dst / "manifest.json").read_text())
        ds = shardkit.open_dataset(str(dst), decode=None)
        stored = [ds.read_encoded(index) for index in range(len(ds))]
        digests.add(tuple((np.asarray(one.payload).tobytes(), one.label, one.crc32) for one in stored))
        first_line = 2 if ".csv" in kind or ".tsv" in kind else 1     # after the header; other kinds have none
        assert ds.key(0).endswith(f":{first_line}")
        assert [column["type"] for column in manifest["schema"]["columns"]] == ["float", "int", "category"]
    assert len(digests) == 1


def test_typed_booleans_are_ints_and_strings_holding_numbers_are_inferred(tmp_path: Path) -> None:
    table = pa.table({"b": [True, False, None], "s": ["1", "2", "x"], "t": ["4", "5", "6"], "label": [0, 1, 1]})
    pq.write_table(table, tmp_path / "t.parquet")
    shardkit.convert(str(tmp_path / "t.parquet"), str(tmp_path / "dst"), label_column="label", quiet=True)
    ds = shardkit.open_dataset(str(tmp_path / "dst"), as_dict=True)
    assert [column["type"] for column in ds.schema.columns] == ["float", "category", "int"]
    assert [ds[index]["b"] for index in range(2)] == [1.0, 0.0] and math.isnan(ds[2]["b"])


def test_a_parquet_dictionary_gives_only_the_values_its_rows_use(tmp_path: Path) -> None:
    """Category columns come from Parquet's dictionary pages: a dictionary value no row uses never
    reaches the vocabulary, a null is a missing value (code -1), and the samples equal those of the
    same column stored as plain strings."""
    kept = pa.DictionaryArray.from_arrays(pa.array([0, 0, None, 2, 0], pa.int32()),
                                          pa.array(["used", "unused", "also"]))
    plain = ["used", "used", None, "also", "used"]
    digests = []
    for name, column in (("dictionary", kept), ("plain", pa.array(plain))):
        pq.write_table(pa.table({"k": column, "label": [0, 1, 0, 1, 1]}), tmp_path / f"{name}.parquet")
        shardkit.convert(str(tmp_path / f"{name}.parquet"), str(tmp_path / name), label_column="label", quiet=True)
        ds = shardkit.open_dataset(str(tmp_path / name), decode=None)
        assert ds.vocabularies["k"] == ["also", "used"]
        digests.append([ds.read_encoded(index).payload.tolist() for index in range(len(ds))])
    assert digests[0] == digests[1] == [[1.0], [1.0], [-1.0], [0.0], [1.0]]


def test_columns_that_are_not_scalars_are_refused_in_one_line(tmp_path: Path) -> None:
    table = pa.table({"v": [[1, 2], [3]], "x": [1.0, 2.0], "label": [0, 1]})
    pq.write_table(table, tmp_path / "nested.parquet")
    with pytest.raises(shardkit.UsageError, match=r"nested\.parquet: column 'v' holds list<.*leave it out"):
        shardkit.convert(str(tmp_path / "nested.parquet"), str(tmp_path / "dst"), label_column="label", quiet=True)
    shardkit.convert(str(tmp_path / "nested.parquet"), str(tmp_path / "ok"), label_column="label", columns=["x"],
                     quiet=True)
    assert len(shardkit.open_dataset(str(tmp_path / "ok"))) == 2


def test_a_folder_of_parquet_files_converts_the_same_with_workers(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    (tmp_path / "src").mkdir()
    for number in range(3):
        table = pa.table({"x": rng.standard_normal(40), "c": rng.choice(["u", "v", f"w{number}"], 40),
                          "label": rng.integers(0, 3, 40)})
        pq.write_table(table, tmp_path / "src" / f"part{number}.parquet", row_group_size=16)
    hashes = []
    for workers in (1, 2):
        dst = tmp_path / f"w{workers}"
        shardkit.convert(str(tmp_path / "src"), str(dst), label_column="label", samples_per_shard=25,
                         workers=workers, quiet=True)
        hashes.append([entry["sha256"] for entry in json.loads((dst / "manifest.json").read_text())["shards"]])
    assert hashes[0] == hashes[1] and len(hashes[0]) == 5
    assert shardkit.open_dataset(str(tmp_path / "w2")).vocabularies["c"] == ["u", "v", "w0", "w1", "w2"]


def test_row_groups_of_one_parquet_file_are_parsed_by_workers_alike(tmp_path: Path) -> None:
    labels = [index % 3 for index in range(100)]
    labels[57] = None                                           # a bad row: its "line" is its row number
    table = pa.table({"x": np.arange(100) / 7, "c": [f"v{index % 11}" for index in range(100)], "label": labels})
    pq.write_table(table, tmp_path / "one.parquet", row_group_size=16)
    results = []
    for workers in (1, 3):
        dst = tmp_path / f"w{workers}"
        shardkit.convert(str(tmp_path / "one.parquet"), str(dst), label_column="label", samples_per_shard=30,
                         workers=workers, quiet=True)
        manifest = json.loads((dst / "manifest.json").read_text())
        results.append(([entry["sha256"] for entry in manifest["shards"]], (dst / "skipped.jsonl").read_text()))
    assert results[0] == results[1]
    assert json.loads(results[1][1]) == {"path": str(tmp_path / "one.parquet"), "line": 58,
                                         "reason": "column 'label': missing label"}
