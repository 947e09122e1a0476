"""Values that contradict a float column's type after the rows sampled for types, in later blocks
and among short rows: each is one bad row, every other row comes back once, in order; number
columns read by Arrow as numbers store what reading them as strings would."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardkit.sources.tabular import readers


def _write(path, rows):
    path.write_text("x,y,label\n" + "".join(f"{row}\n" for row in rows), encoding="utf-8")
    return path


def test_a_late_word_in_a_float_column_is_one_bad_row(tmp_path, monkeypatch, convert_csv, read_skipped):
    """Blocks of 4 KiB: the word is past the type sample, after a short row; each row comes back once."""
    monkeypatch.setattr(readers, "BLOCK_BYTES", 4096)
    rows = [f"{index * 0.5},{index % 7} ,{index % 3}" for index in range(15000)]
    rows[300] = "1,2"                                 # wrong number of fields, before the failing block
    rows[12000] = "oops,1,0"                          # not a number, past the 10,000 rows sampled for types
    rows[14000] = "NA,1,0"                           # a missing value after the switch to text
    src = _write(tmp_path / "t.csv", rows)
    ds = convert_csv(src, "hdf5", label_column="label", open_kwargs={"as_dict": True})
    assert len(ds) == 15000 - 2
    skipped = read_skipped(ds.root)
    assert [entry["line"] for entry in skipped] == [302, 12002]
    assert "'oops' is not a number" in skipped[1]["reason"]
    xs = np.array([ds[index]["x"] for index in range(len(ds))])
    expected = np.array([index * 0.5 for index in range(15000) if index not in (300, 12000)], dtype=np.float32)
    expected[14000 - 2] = np.nan
    np.testing.assert_array_equal(xs, expected)
    assert [ds[index]["label"] for index in (0, 299, 300, 11998, 11999, 14997)] == [0, 2, 1, 2, 1, 2]


def test_missing_spellings_read_as_numbers_stay_nan(tmp_path, convert_csv):
    src = _write(tmp_path / "m.csv", ["1.5,2,0", "NA,3,1", ",4,0", "nan,5,1", "N/A,6,0", "-2,7,1"])
    ds = convert_csv(src, "hdf5", label_column="label", open_kwargs={"as_dict": True})
    xs = [ds[index]["x"] for index in range(len(ds))]
    assert xs[0] == 1.5 and xs[5] == -2 and all(np.isnan(value) for value in xs[1:5])


FIELDS = ["1.5", "-2", "", "NA", '"NA"', '"3"', " 4", "5 ", "nan", "-nan", "NaN", "inf", "-inf", "1e400", "oops",
          "1_000", "0x1", "+.5", "7.", "null", "N/A", "2.2250738585072011e-308", "9007199254740993"]


def _as_strings(text_blocks):
    """readers._text_blocks reading every field as a string (no number column parsed by Arrow)."""
    return lambda item, fields, delimiter, numeric, *rest: text_blocks(item, fields, delimiter, (), *rest)


def _stored(tmp_path, src, name) -> tuple:
    """(sha256 of each shard, skipped.jsonl) of src converted with 1,000-row shards."""
    import json

    import shardkit
    dst = tmp_path / name
    shardkit.convert(str(src), str(dst), label_column="label", samples_per_shard=1000, quiet=True)
    manifest = json.loads((dst / "manifest.json").read_text())
    return [entry["sha256"] for entry in manifest["shards"]], (dst / "skipped.jsonl").read_text()


@pytest.mark.parametrize("late", [None, "oops", "-nan", "nan", " 7", "1_000"])
def test_numbers_read_by_arrow_store_what_strings_would(tmp_path, monkeypatch, late) -> None:
    """Number columns are parsed by Arrow as float64 until a block holds a field it does not read
    as a number, or reads as NaN; the stored bytes and skipped rows are those of reading every
    field as a string, whichever block that happens in."""
    monkeypatch.setattr(readers, "BLOCK_BYTES", 2048)
    rng = np.random.default_rng(7)
    rows = [f"{rng.standard_normal():.6g},{['', 'NA', '3', ' 2'][index % 4] if index % 5 == 0 else index},{index % 3}"
            for index in range(6000)]
    rows[100] = "1,2"                                 # wrong number of fields
    rows[4321] = "NA,,1"
    if late is not None:
        rows[5000] = f"{late},9,1"
    src = _write(tmp_path / "t.csv", rows)
    typed = _stored(tmp_path, src, "typed")
    monkeypatch.setattr(readers, "_text_blocks", _as_strings(readers._text_blocks))
    assert typed == _stored(tmp_path, src, "strings")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(FIELDS), st.sampled_from(FIELDS)), min_size=1, max_size=30))
def test_any_mix_of_number_fields_stores_what_strings_would(tmp_path_factory, monkeypatch, fields) -> None:
    tmp_path = tmp_path_factory.mktemp("mix")
    src = _write(tmp_path / "m.csv", [f"{x},{y},{index % 2}" for index, (x, y) in enumerate(fields)])
    typed = _stored(tmp_path, src, "typed")
    with monkeypatch.context() as patch:
        patch.setattr(readers, "_text_blocks", _as_strings(readers._text_blocks))
        assert typed == _stored(tmp_path, src, "strings")
