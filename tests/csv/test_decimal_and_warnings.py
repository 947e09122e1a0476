"""--decimal , reads European numbers; a column that is numeric but for a few values is warned about."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.cli import main


def _euro(path: Path) -> Path:
    rows = "".join(f"{i},5;{-i};{i % 2}\n" for i in range(40))
    path.write_text("price;n;label\n" + rows + "-inf;1e3;0\n", encoding="utf-8")
    return path


def test_decimal_comma_makes_numbers(tmp_path: Path, convert_csv, fmt: str) -> None:
    src = _euro(tmp_path / "euro.csv")
    ds = convert_csv(src, fmt, label_column="label", decimal=",")
    assert [column["type"] for column in ds.schema.columns] == ["float", "float"]
    assert ds[3][0].tolist() == [3.5, -3.0] and ds[40][0].tolist() == [float("-inf"), 1000.0]
    assert ds.manifest.source["summary"]["decimal"] == ","


def test_without_it_the_column_is_a_category_and_a_warning_says_why(tmp_path: Path) -> None:
    src = _euro(tmp_path / "euro.csv")
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "dst"), "--label-column", "label", "-q"])
    assert result.exit_code == 0, result.output
    assert "column 'price' became a category" in result.stderr and "--decimal ," in result.stderr
    assert shardkit.open_dataset(str(tmp_path / "dst")).vocabularies["price"][:2] == ["-inf", "0,5"]


def test_a_few_stray_values_are_warned_about_and_words_are_not(tmp_path: Path, make_csv) -> None:
    rows = [[f"{i}.25", f"w{i % 3}", i % 2] for i in range(50)] + [["12 kg", "w1", 0]]
    report = shardkit.convert(str(make_csv("s.csv", ["weight", "word", "label"], rows)), str(tmp_path / "dst"),
                              label_column="label", quiet=True)
    assert len(report.warnings) == 1
    assert "column 'weight' became a category because 1 of 51" in report.warnings[0] and "'12 kg'" in report.warnings[0]


def test_decimal_comma_needs_another_delimiter(tmp_path: Path, make_csv) -> None:
    src = make_csv("c.csv", ["a", "label"], [["1", 0]])
    with pytest.raises(shardkit.UsageError, match="--decimal , needs another delimiter"):
        shardkit.convert(str(src), str(tmp_path / "dst"), label_column="label", decimal=",", quiet=True)
    with pytest.raises(shardkit.UsageError, match="--decimal must be"):
        shardkit.convert(str(src), str(tmp_path / "dst"), label_column="label", decimal="x", quiet=True)


FIELDS = st.sampled_from(["1.5", "-2", " 3e4 ", "inf", "Infinity", "+.5", "١٢", "1_000", "nan", "nAn", " nan ", "NA",
                          "", " ", "n/a", "none", "x", "12 kg", "kg 12", "Inch", ".", "-", "e5", "0,5", "1,5e3", "日本"])


@settings(max_examples=300, deadline=None)
@given(st.lists(FIELDS, min_size=1, max_size=40), st.sampled_from([None, ","]))
def test_the_quick_look_at_words_never_changes_the_warning(fields, decimal) -> None:
    """mostly_numbers first skips columns that are surely mostly words (a check per distinct value);
    its answer is the one float() on every distinct value gives."""
    import pyarrow as pa

    from shardkit.sources.tabular import types
    sampled = pa.array(fields, pa.string())
    quick = types.mostly_numbers("c", sampled, decimal, "f.csv")
    original, types._mostly_words = types._mostly_words, lambda values: False
    try:
        assert quick == types.mostly_numbers("c", sampled, decimal, "f.csv")
    finally:
        types._mostly_words = original
