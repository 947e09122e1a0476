"""Messy CSV files: each problem is handled, or refused naming the file and line; nothing half-written."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_bad_rows_are_skipped_and_listed_with_file_line_and_column(tmp_path, convert_csv, read_skipped, fmt):
    src = _write(tmp_path / "bad.csv", (
        "a,b,label\n"
        "1,2,0\n"
        "\"3\",\"multi\nline\",1\n"          # line 3-4: b is text in a numeric column
        "5,6\n"                             # line 5: ragged
        "7,8,9,10\n"                        # line 6: ragged
        "9,x\x00y,1\n"                      # line 7: NUL byte
        "11,12,\n"                          # line 8: missing label
        "13,14,1\n").encode() + b"15,\xff\xfe,0\n" + b"17,18,1\r\n")
    schema = _write(tmp_path / "schema.json", b'{"columns": [{"name": "b", "type": "float"}]}')
    ds = convert_csv(src, fmt, label_column="label", schema_file=str(schema))
    assert len(ds) == 3
    assert [ds[i][0].tolist() for i in range(3)] == [[1.0, 2.0], [13.0, 14.0], [17.0, 18.0]]
    skipped = read_skipped(ds.root)
    assert [(entry["path"], entry["line"]) for entry in skipped] == [
        (str(src), 3), (str(src), 5), (str(src), 6), (str(src), 7), (str(src), 8), (str(src), 10)]
    reasons = [entry["reason"] for entry in skipped]
    assert "column 'b'" in reasons[0] and "is not a number" in reasons[0]
    assert "2 fields, the header has 3" in reasons[1] and "4 fields" in reasons[2]
    assert "NUL" in reasons[3] and "missing label" in reasons[4] and "UTF-8" in reasons[5]
    assert ds.manifest.source["summary"]["skipped"] == 6


def test_nul_and_bad_utf8_in_category_and_label_values_skip_their_rows(tmp_path, convert_csv, read_skipped):
    """Category and class-label values are looked at once per distinct value: each row holding a bad
    one is still skipped with its line, the first column's problem named, and the bad values reach
    no vocabulary."""
    rows = [b"1,red,cat", b"2,r\x00d,cat", b"3,blue,d\xffg", b"4,\xfe,c\x00t", b"5,blue,dog", b"6,r\x00d,dog",
            b"7,caf\xc3\xa9,cat"]
    src = _write(tmp_path / "cats.csv", b"x,colour,label\n" + b"\n".join(rows) + b"\n")
    ds = convert_csv(src, label_column="label")
    assert [ds[i][0].tolist()[0] for i in range(len(ds))] == [1.0, 5.0, 7.0]
    assert [(entry["line"], entry["reason"].split(" (")[0]) for entry in read_skipped(ds.root)] == [
        (3, "contains a NUL byte"), (4, "not valid UTF-8 text"), (5, "not valid UTF-8 text"),
        (7, "contains a NUL byte")]
    columns = {column["name"]: column for column in ds.manifest.schema.columns}
    assert columns["colour"]["vocabulary"] == ["blue", "café", "red"]
    assert ds.classes == ["cat", "dog"]


def test_on_error_fail_stops_with_the_line_and_leaves_no_manifest(tmp_path, fmt):
    src = _write(tmp_path / "bad.csv", b"a,label\n1,0\n2,1\n3,0,9\n")
    dst = tmp_path / "dst"
    with pytest.raises(shardkit.ConversionError, match=r"bad\.csv:4: row has 3 fields, the header has 2"):
        shardkit.convert(str(src), str(dst), format=fmt, label_column="label", on_error="fail", quiet=True)
    assert not (dst / "manifest.json").exists()


def test_bom_crlf_quoted_newlines_and_a_sniffed_delimiter(tmp_path, convert_csv, fmt):
    data = "\ufeffname;value;label\r\n\"semi;colon\";1;a\r\n\"two\r\nlines\";2;b\r\n".encode()
    src = _write(tmp_path / "euro.csv", data)
    ds = convert_csv(src, fmt, label_column="label", text_columns=["name"], open_kwargs={"as_dict": True})
    assert ds.columns == ["value", "name"]
    assert ds.manifest.source["summary"]["delimiter"] == ";"
    assert ds[0] == {"name": "semi;colon", "value": 1, "label": 0}
    assert ds[1] == {"name": "two\r\nlines", "value": 2, "label": 1}


def test_tab_delimiter_is_sniffed_and_can_be_given(tmp_path, convert_csv, fmt):
    src = _write(tmp_path / "t.csv", b"a\tb\tlabel\n1\t2\t0\n3\t4\t1\n")
    assert convert_csv(src, fmt, label_column="label")[1][0].tolist() == [3.0, 4.0]
    assert convert_csv(src, fmt, label_column="label", delimiter="tab")[0][0].tolist() == [1.0, 2.0]
    with pytest.raises(shardkit.UsageError, match="label column 'label'"):
        convert_csv(src, fmt, label_column="label", delimiter=",")


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"\xef\xbb\xbf\n\n", "empty file"),
    (b"a,b,label\n", "header only, no data rows"),
    (b"a,b,label\r\n\r\n", "header only, no data rows"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary content"),
    (b"a,b,label\r1,2,3\r", "CR only"),
    (b"caf\xe9,b,label\n1,2,3\n", "not UTF-8"),
])
def test_whole_file_problems_name_the_file_and_line(tmp_path, content, message):
    src = _write(tmp_path / "data.csv", content)
    dst = tmp_path / "dst"
    with pytest.raises(shardkit.SourceError, match=rf"data\.csv:\d+: .*{message}"):
        shardkit.convert(str(src), str(dst), label_column="label", quiet=True)
    assert not (dst / "manifest.json").exists()


def test_unterminated_quote_is_a_bad_last_row(tmp_path, convert_csv, read_skipped, fmt):
    src = _write(tmp_path / "q.csv", b"a,label\n1,0\n\"2,1\n3,1\n")
    ds = convert_csv(src, fmt, label_column="label")
    assert len(ds) == 1
    assert read_skipped(ds.root) == [{"path": str(src), "line": 3,
                                      "reason": "quoted field not closed before the end of the file"}]


def test_type_contradictions_after_the_sample(tmp_path, convert_csv, read_skipped, fmt):
    lines = ["n,k,label"] + [f"{i},{i},0" for i in range(12_000)] + ["2.5,1,0", "3,,1", "16777217,4,1", "4,5,1"]
    src = _write(tmp_path / "late.csv", ("\n".join(lines) + "\n").encode())
    ds = convert_csv(src, fmt, label_column="label")
    assert [column["type"] for column in ds.schema.columns] == ["int", "int"]
    assert len(ds) == 12_001 and ds[12_000][0].tolist() == [4.0, 5.0]
    reasons = [(entry["line"], entry["reason"]) for entry in read_skipped(ds.root)]
    assert reasons[0] == (12_002, "column 'n': '2.5' is not an integer")
    assert reasons[1][0] == 12_003 and "missing value in an integer column" in reasons[1][1]
    assert reasons[2][0] == 12_004 and "does not fit float32 exactly" in reasons[2][1]


def test_label_problems_are_usage_errors(tmp_path):
    src = _write(tmp_path / "r.csv", b"x,y\n1,0.5\n2,1.5\n")
    with pytest.raises(shardkit.UsageError, match="non-integer numbers"):
        shardkit.convert(str(src), str(tmp_path / "d1"), label_column="y", quiet=True)
    with pytest.raises(shardkit.UsageError, match="--label-column COLUMN"):
        shardkit.convert(str(src), str(tmp_path / "d2"), quiet=True)
    with pytest.raises(shardkit.UsageError, match="no label column 'z'"):
        shardkit.convert(str(src), str(tmp_path / "d3"), label_column="z", quiet=True)


def test_missing_numbers_stay_nan_through_the_numeric_fast_path(tmp_path, convert_csv, fmt):
    lines = ["a,b,label"] + [f"{i}.5,{i},1" for i in range(3000)] + [",NA,0"] + [f"{i},1,1" for i in range(3000)]
    ds = convert_csv(_write(tmp_path / "f.csv", ("\n".join(lines) + "\n").encode()), fmt, label_column="label")
    assert len(ds) == 6001
    features, label = ds[3000]
    assert all(math.isnan(value) for value in features.tolist()) and label == 0
    assert ds[2999][0].tolist() == [2999.5, 2999.0] and ds[6000][0].tolist() == [2999.0, 1.0]


def test_cli_reports_one_line_and_exit_codes(tmp_path):
    runner = CliRunner()
    empty = _write(tmp_path / "empty.csv", b"")
    result = runner.invoke(main, ["convert", str(empty), str(tmp_path / "d1"), "--label-column", "y", "-q"])
    assert result.exit_code == 1 and result.output.count("\n") == 1 and "empty.csv:1: empty file" in result.output
    good = _write(tmp_path / "good.csv", b"x,y\n1,a\n2,b\n")
    result = runner.invoke(main, ["convert", str(good), str(tmp_path / "d2"), "-q"])
    assert result.exit_code == 2 and "--label-column" in result.output
    result = runner.invoke(main, ["convert", str(good), str(tmp_path / "d3"), "--label-column", "y", "-q",
                                  "--columns", "x,y", "--delimiter", ","])
    assert result.exit_code == 0, result.output
    assert "wrote 2 samples" in result.output
