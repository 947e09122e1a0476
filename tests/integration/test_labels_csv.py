"""The labels CSV of an image tree: delimiter given or sniffed, bad rows skipped and listed,
absolute paths inside SRC, integer labels in numeric order."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List

import pytest

import shardkit
from tests.conftest import image_files


def _rows(image_tree: Path, labels: List[str], absolute: bool = False) -> List[List[str]]:
    files = image_files(image_tree)[:len(labels)]
    return [[str(image_tree / rel) if absolute else rel, label] for rel, label in zip(files, labels)]


def _write(path: Path, rows: List[List[str]], delimiter: str = ",") -> Path:
    path.write_text("\n".join(delimiter.join(row) for row in [["path", "label"], *rows]) + "\n")
    return path


def _labels(dst: Path) -> List[str]:
    ds = shardkit.open_dataset(dst, decode=None)
    return [ds.classes[label] for _, label in (ds[i] for i in range(len(ds)))]


@pytest.mark.parametrize("delimiter, given", [(";", ";"), ("\t", "tab"), (";", None), ("\t", None), ("|", None)])
def test_delimiter_given_or_sniffed(delimiter: str, given, image_tree: Path, tmp_path: Path) -> None:
    rows = _rows(image_tree, ["a", "b", "a", "b", "a", "b"])
    labels = _write(tmp_path / "labels.csv", rows, delimiter)
    dst = tmp_path / "dst"
    report = shardkit.convert(str(image_tree), str(dst), labels=str(labels), delimiter=given, order="source",
                              quiet=True)
    assert report.num_samples == 6 and report.skipped == 0
    assert _labels(dst) == [label for _, label in rows]


def test_bad_rows_are_skipped_and_listed(image_tree: Path, tmp_path: Path) -> None:
    rows = _rows(image_tree, ["a", "b", "a", "b", "a"])
    bad = [["", "a"], [rows[1][0], "a"], ["../outside.png", "b"], [rows[2][0], ""], ["/etc/passwd", "a"]]
    labels = _write(tmp_path / "labels.csv", rows + bad)
    dst = tmp_path / "dst"
    report = shardkit.convert(str(image_tree), str(dst), labels=str(labels), order="source", quiet=True)
    assert report.num_samples == 5 and report.skipped == 5
    listed = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    assert sorted(item["line"] for item in listed) == [7, 8, 9, 10, 11]
    reasons = " ".join(item["reason"] for item in listed)
    assert "empty path or label" in reasons and "listed twice" in reasons and "outside SRC" in reasons
    assert _labels(dst) == ["a", "b", "a", "b", "a"]      # a path's first row is kept


def test_first_bad_row_stops_with_on_error_fail(image_tree: Path, tmp_path: Path) -> None:
    labels = _write(tmp_path / "labels.csv", _rows(image_tree, ["a", "b"]) + [["", "a"], ["", "b"]])
    with pytest.raises(shardkit.ConversionError, match=r"labels.csv:4: empty path or label"):
        shardkit.convert(str(image_tree), str(tmp_path / "dst"), labels=str(labels), on_error="fail", quiet=True)


def test_absolute_path_inside_src_is_accepted(image_tree: Path, tmp_path: Path) -> None:
    rows = _rows(image_tree, ["x", "y", "x"], absolute=True)
    labels = _write(tmp_path / "labels.csv", rows)
    dst = tmp_path / "dst"
    report = shardkit.convert(str(image_tree), str(dst), labels=str(labels), order="source", quiet=True)
    assert report.num_samples == 3 and report.skipped == 0
    assert _labels(dst) == ["x", "y", "x"]


def test_integer_labels_sort_numerically(image_tree: Path, tmp_path: Path) -> None:
    labels = _write(tmp_path / "labels.csv", _rows(image_tree, ["10", "2", "1", "10", "-3"]))
    dst = tmp_path / "dst"
    shardkit.convert(str(image_tree), str(dst), labels=str(labels), order="source", quiet=True)
    assert shardkit.open_dataset(dst).classes == ["-3", "1", "2", "10"]
