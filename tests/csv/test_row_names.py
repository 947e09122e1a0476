"""Tables exported from R or pandas carry a row-name column: unnamed ("") or `__index_level_0__`.
Every kind of file reads it as the CSV path does (an unnamed column is `column_<i>`); a column that
only numbers the rows draws a warning naming --drop-columns, which leaves it out."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main

SPECIES = ("setosa", "versicolor", "virginica")


def _iris_like(rows_per_class: int = 40) -> Dict[str, List[Any]]:
    """Columns of a table sorted by its label, as R's iris is, with R's row names "1".."n" first."""
    rng = np.random.default_rng(0)
    species = [name for name in SPECIES for _ in range(rows_per_class)]
    count = len(species)
    return {"": [str(row) for row in range(1, count + 1)],
            "Sepal.Length": [round(float(value), 1) for value in rng.uniform(4, 8, count)],
            "Petal.Width": [round(float(value), 1) for value in rng.uniform(0.1, 2.5, count)],
            "Species": species}


def _csv(path: Path, columns: Dict[str, List[Any]]) -> Path:
    names = list(columns)
    lines = [",".join(f'"{name}"' for name in names)]
    lines += [",".join(str(columns[name][row]) for name in names) for row in range(len(columns[names[0]]))]
    path.write_text("\n".join(lines) + "\n")
    return path


def _parquet(path: Path, columns: Dict[str, List[Any]], **kwargs: Any) -> Path:
    pq.write_table(pa.table(columns), path, **kwargs)
    return path


def _rows(dst: Path) -> List[List[float]]:
    ds = shardkit.open_dataset(dst)
    return [ds[index][0].tolist() + [ds.classes[ds[index][1]]] for index in range(len(ds))]


def _columns(dst: Path) -> List[str]:
    return [column["name"] for column in shardkit.open_dataset(dst).manifest.schema.columns]


@pytest.mark.parametrize("kind", ["parquet", "feather", "jsonl"])
def test_an_unnamed_column_reads_as_in_the_csv(tmp_path: Path, kind: str) -> None:
    columns = _iris_like(5)
    src = tmp_path / f"iris.{kind}"
    if kind == "parquet":
        _parquet(src, columns)
    elif kind == "feather":
        feather.write_feather(pa.table(columns), str(src), compression="uncompressed")
    else:
        src.write_text("".join(json.dumps(row) + "\n" for row in pa.table(columns).to_pylist()))
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "dst"), "--label-column", "Species",
                                       "--quiet"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    shardkit.convert(str(_csv(tmp_path / "iris.csv", columns)), str(tmp_path / "csv"), label_column="Species")
    assert _columns(tmp_path / "dst") == _columns(tmp_path / "csv") == ["column_0", "Sepal.Length", "Petal.Width"]
    assert _rows(tmp_path / "dst") == _rows(tmp_path / "csv")


def test_a_pandas_index_column_reads_as_a_named_column(tmp_path: Path) -> None:
    columns = _iris_like(5)
    columns["__index_level_0__"] = [row * 10 for row in range(15)]
    del columns[""]
    src = _parquet(tmp_path / "pandas.parquet", columns)
    shardkit.convert(str(src), str(tmp_path / "dst"), label_column="Species")
    assert _columns(tmp_path / "dst") == ["Sepal.Length", "Petal.Width", "__index_level_0__"]
    assert [row[2] for row in _rows(tmp_path / "dst")] == [row * 10 for row in range(15)]


def test_a_row_number_column_is_warned_about_and_dropped(tmp_path: Path) -> None:
    src = _csv(tmp_path / "iris.csv", _iris_like())
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "dst"), "--label-column", "Species",
                                       "--quiet"])
    assert result.exit_code == 0, result.output
    assert "iris.csv: column 'column_0' holds the row numbers (1..n)" in result.output
    assert "--drop-columns column_0" in result.output
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "cli"), "--label-column", "Species",
                                       "--drop-columns", "column_0", "--quiet"])
    assert result.exit_code == 0 and "warning" not in result.output, result.output
    assert _columns(tmp_path / "cli") == ["Sepal.Length", "Petal.Width"]
    for name, dropped in (("list", ["column_0"]), ("text", "column_0, Petal.Width")):
        report = shardkit.convert(str(src), str(tmp_path / name), label_column="Species", drop_columns=dropped)
        assert report.warnings == []
    assert _columns(tmp_path / "list") == ["Sepal.Length", "Petal.Width"]
    assert _columns(tmp_path / "text") == ["Sepal.Length"]


def test_a_zero_based_index_over_row_groups_and_workers_is_found(tmp_path: Path) -> None:
    columns = _iris_like()
    del columns[""]
    columns["__index_level_0__"] = list(range(120))
    src = _parquet(tmp_path / "iris.parquet", columns, row_group_size=25)
    report = shardkit.convert(str(src), str(tmp_path / "dst"), label_column="Species", workers=2)
    assert len(report.warnings) == 1 and "'__index_level_0__' holds the row numbers (0..n-1)" in report.warnings[0]


def test_row_numbers_restarting_in_each_file_are_found(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    columns = _iris_like()
    for index, species in enumerate(SPECIES):
        part = {name: [value for value, kind in zip(values, columns["Species"]) if kind == species]
                for name, values in columns.items()}
        part[""] = [str(row) for row in range(1, len(part[""]) + 1)]
        _csv(folder / f"{index}.csv", part)
    report = shardkit.convert(str(folder), str(tmp_path / "dst"), label_column="Species")
    assert len(report.warnings) == 1 and "(1..n in each file)" in report.warnings[0]


@pytest.mark.parametrize("change", ["gap", "shuffled", "offset", "missing"])
def test_columns_that_do_not_number_the_rows_draw_no_warning(tmp_path: Path, change: str) -> None:
    columns = _iris_like()
    numbers = list(range(1, 121))
    if change == "gap":
        numbers[60:] = [value + 1 for value in numbers[60:]]
    elif change == "shuffled":
        numbers[3], numbers[4] = numbers[4], numbers[3]
    elif change == "offset":
        numbers = [value + 1 for value in numbers]
    columns[""] = [str(value) for value in numbers]
    if change == "missing":
        columns[""][50] = ""
    report = shardkit.convert(str(_csv(tmp_path / "t.csv", columns)), str(tmp_path / "dst"), label_column="Species")
    assert report.warnings == []


def test_drop_columns_mistakes_are_usage_errors(tmp_path: Path) -> None:
    src = _csv(tmp_path / "iris.csv", _iris_like(3))
    for options, message in ((dict(drop_columns="nope"), r"--drop-columns: no column 'nope'"),
                             (dict(drop_columns=["Species"]), r"'Species' is the label column"),
                             (dict(drop_columns="column_0", columns=["Sepal.Length"]), r"give one of them")):
        with pytest.raises(shardkit.UsageError, match=message):
            shardkit.convert(str(src), str(tmp_path / "dst"), label_column="Species", **options)
        assert not (tmp_path / "dst").exists()
    image_tree = tmp_path / "images"
    shardkit.samples.make_image_tree(str(image_tree), num_images=2, classes=("a",), seed=1, sizes=(8, 9))
    with pytest.raises(shardkit.UsageError, match=r"--drop-columns does not apply to an image tree"):
        shardkit.convert(str(image_tree), str(tmp_path / "dst"), drop_columns="x")
