"""Values that contradict a float column's type after the rows sampled for types, in later blocks
and among short rows: each is one bad row, every other row comes back once, in order."""
from __future__ import annotations

import numpy as np

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
