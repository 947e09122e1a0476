"""A table row is named the same everywhere — its key (`file:line`) and its skipped.jsonl entry —
by the physical line its first line is on: the header is line 1, a quoted newline makes a row
span lines, blank lines hold no row. JSON Lines count lines the same way; Parquet and Arrow files
have no lines, and their rows are numbered from 1."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Tuple

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import shardkit


def _records(end: str) -> Tuple[str, List[Tuple[int, bool]]]:
    """A CSV's text (a header spanning two lines, rows with quoted newlines, blank lines, a ragged
    row and a row with a word in a number column) and (start line, good) of each row."""
    pieces = ['x,"note\nabout it",kind']
    rows: List[Tuple[int, bool]] = []
    line = 3
    for index in range(40):
        note = '"two\nlines"' if index % 4 == 1 else ('"three\n\nlines"' if index % 9 == 2 else f"n{index}")
        value = "oops" if index == 17 else str(index)
        text = f"{value},{note},{'ab'[index % 2]}" if index != 23 else "1,2"
        pieces.append(text)
        rows.append((line, index not in (17, 23)))
        line += 1 + text.count("\n")
        if index % 10 == 5:
            pieces.append("")                                    # a blank line
            line += 1
    if end == "mixed":              # LF, and a lone CR after every 7th record (not before a blank line: CR LF)
        ends = ["\r" if index % 7 == 6 and pieces[index + 1:index + 2] != [""] else "\n"
                for index in range(len(pieces))]
        return "".join(piece + line_end for piece, line_end in zip(pieces, ends)), rows
    return end.join(piece.replace("\n", end) for piece in pieces) + end, rows


@pytest.mark.parametrize("end", ["\n", "\r\n", "mixed"], ids=["LF", "CRLF", "lone-CR"])
def test_keys_and_skipped_rows_name_the_physical_line(tmp_path: Path, end: str) -> None:
    text, rows = _records(end)
    src = tmp_path / "t.csv"
    src.write_bytes(text.encode())
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": [{"name": "x", "type": "float"}]}))
    dst = tmp_path / "dst"
    header_end = "\n" if end == "mixed" else end
    shardkit.convert(str(src), str(dst), label_column="kind", text_columns=[f"note{header_end}about it"],
                     schema_file=str(schema), samples_per_shard=7, quiet=True)
    ds = shardkit.open_dataset(dst)
    assert [ds.key(index) for index in range(len(ds))] == [f"t.csv:{line}" for line, good in rows if good]
    skipped = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    assert [entry["line"] for entry in skipped] == [line for line, good in rows if not good]
    physical = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    assert physical[skipped[0]["line"] - 1].startswith("oops,") and physical[skipped[1]["line"] - 1] == "1,2"


def test_one_row_per_line_keys_count_from_the_line_after_the_header(tmp_path: Path) -> None:
    src = tmp_path / "iris.csv"
    src.write_text("a,kind\n" + "".join(f"{index},{'xy'[index % 2]}\n" for index in range(3000)))
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), label_column="kind", samples_per_shard=1000, quiet=True)
    ds = shardkit.open_dataset(dst, as_dict=True)
    assert [ds.key(index) for index in (0, 1, 2999)] == ["iris.csv:2", "iris.csv:3", "iris.csv:3001"]
    assert ds[2999]["a"] == 2999.0


def test_json_lines_keys_name_the_line_blank_lines_included(tmp_path: Path) -> None:
    src = tmp_path / "rows.jsonl"
    lines = []
    for index in range(12):
        lines.append(json.dumps({"v": index * 2, "kind": "xy"[index % 2]}))
        if index % 5 == 0:
            lines.append("   ")
    src.write_text("\n".join(lines) + "\n")
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), label_column="kind", quiet=True)
    ds = shardkit.open_dataset(dst, as_dict=True)
    expected = [f"rows.jsonl:{number}" for number, line in enumerate(lines, start=1) if line.strip()]
    assert [ds.key(index) for index in range(len(ds))] == expected
    assert [ds[index]["v"] for index in range(len(ds))] == [index * 2.0 for index in range(12)]


def test_parquet_rows_are_numbered_from_one_across_row_groups(tmp_path: Path) -> None:
    src = tmp_path / "rows.parquet"
    table = pa.table({"v": [float(index) for index in range(100)], "kind": ["xy"[index % 2] for index in range(100)]})
    pq.write_table(table, src, row_group_size=30)
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), label_column="kind", workers=2, samples_per_shard=40, quiet=True)
    ds = shardkit.open_dataset(dst, as_dict=True)
    assert [ds.key(index) for index in range(len(ds))] == [f"rows.parquet:{row}" for row in range(1, 101)]
    assert [ds[index]["v"] for index in (0, 30, 99)] == [0.0, 30.0, 99.0]
