"""The CSV guide's and the tabular record page's python blocks run as written and tell the truth."""
from __future__ import annotations

import re
from pathlib import Path

import shardkit

REPO = Path(__file__).resolve().parents[2]


def _python_blocks(page: Path) -> list:
    return re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def test_csv_guide_snippet_runs(make_csv, tmp_path):
    src = make_csv("people.csv", ["age", "income", "city", "notes", "y"],
                   [[41, 52000.0, "Paris", "free text", "no"], [35, 61000.5, "Berlin", "more, \"text\"", "yes"]])
    dst = tmp_path / "DST"
    shardkit.convert(str(src), str(dst), label_column="y", text_columns=["notes"], quiet=True)
    blocks = _python_blocks(REPO / "docs" / "tables.md")
    assert blocks
    scope = {}
    for block in blocks:
        exec(compile(block.replace('"DST"', repr(str(dst))), "docs/tables.md", "exec"), scope)
    assert scope["row"] == {"age": 41, "income": 52000.0, "city": 1, "notes": "free text", "y": 0}
    assert scope["ds"].vocabularies == {"city": ["Berlin", "Paris"]}


def test_record_page_reads_stored_payloads_like_shardkit(make_csv, tmp_path, fmt):
    blocks = _python_blocks(REPO / "formats" / "record-tabular.md")
    assert blocks
    scope: dict = {}
    exec(compile(blocks[0], "formats/record-tabular.md", "exec"), scope)
    rows = [[0.25 * i, f"line {i}\nsecond, \"quoted\" é", i, i % 2] for i in range(10)]
    src = make_csv("t.csv", ["a", "note", "b", "label"], rows)
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), format=fmt, label_column="label", text_columns=["note"], quiet=True)
    raw = shardkit.open_dataset(dst, decode=None)
    schema = raw.manifest.schema.to_dict()
    assert len(raw) == len(rows)
    for index, (a, note, b, label) in enumerate(rows):      # the page's reader against the CSV itself
        vector, texts = scope["read_tabular"](raw[index][0], schema)
        assert vector.tolist() == [a, b] and texts == {"note": note} and raw[index][1] == label
