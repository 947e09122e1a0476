"""Property tests: whatever Python's csv module writes comes back unchanged."""
from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.sources.tabular import readers
from shardkit.sources.tabular.files import TableFile, read_head
from shardkit.sources.tabular.values import strings

# Any text but NUL (refused as binary) and lone surrogates (not encodable as UTF-8).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=30)
SPECIAL = st.sampled_from(['"', ",", "\n", "\r\n", "\r", '""', " ", ";", "\t", "é", "\u2028", "日本", "🙂"])
FIELD = st.lists(st.one_of(TEXT, SPECIAL), min_size=1, max_size=4).map("".join)


def _csv_text(rows, delimiter=",", lineterminator="\r\n"):
    buffer = io.StringIO(newline="")
    csv.writer(buffer, delimiter=delimiter, lineterminator=lineterminator).writerows(rows)
    return buffer.getvalue()


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.lists(FIELD, min_size=2, max_size=2), min_size=2, max_size=12),
       block_size=st.integers(64, 512), delimiter=st.sampled_from([",", ";", "\t"]),
       lineterminator=st.sampled_from(["\r\n", "\n"]))
def test_blocks_match_the_csv_module(rows, block_size, delimiter, lineterminator):
    """Rows read by Arrow block by block (quoted newlines included) equal csv.reader's rows."""
    # with LF line ends the csv module leaves a field's CR unquoted, and then cannot read it back itself
    assume(lineterminator == "\r\n" or not any("\r" in value for row in rows for value in row))
    data = _csv_text(rows, delimiter, lineterminator).encode("utf-8")
    assume(data.strip())                # whitespace only (blank tab-separated fields): refused as an empty file
    expected = [row for row in csv.reader(io.StringIO(data.decode("utf-8"), newline=""), delimiter=delimiter)]
    longest = max(len(_csv_text([row], delimiter, lineterminator).encode("utf-8")) for row in expected)
    assume(all(len(row) == 2 for row in expected) and 2 * longest < block_size)   # a record fits in a block
    folder = Path(tempfile.mkdtemp())
    try:
        path = folder / "mem.csv"
        path.write_bytes(data)
        item = TableFile(str(path), "mem.csv", len(data), 0, "text", read_head(str(path), delimiter))
        saved, readers.BLOCK_BYTES = readers.BLOCK_BYTES, block_size
        try:
            got = [list(pair) for block in readers.read_blocks(item, [0, 1], delimiter)
                   for pair in zip(*(strings(array) for array in block.arrays))]
        finally:
            readers.BLOCK_BYTES = saved
    finally:
        shutil.rmtree(folder)
    assert [item.head.header] + got == expected


# docs/tables.md, "Missing values", written out here rather than taken from the code under test.
DOCUMENTED_MISSING = {"", "NA", "N/A", "n/a", "na", "NaN", "nan", "NAN", "-nan", "-NaN", "null", "NULL", "Null",
                      "None", "none", "<NA>", "#N/A"}
KIND = st.one_of(FIELD, st.sampled_from(sorted(DOCUMENTED_MISSING)), st.sampled_from([" NA ", "x", "y"]))


def documented_missing(value: str) -> bool:
    """Missing by the documented rule: one of the spellings, spaces around it ignored."""
    return value.strip() in DOCUMENTED_MISSING


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(FIELD, KIND, st.integers(-5, 5)), min_size=1, max_size=60))
def test_text_and_category_values_come_back_unchanged(rows, fmt):
    """Strings with quotes, delimiters, newlines and unicode: verbatim as text, exact through the
    vocabulary of a column declared category (so the check never depends on type inference)."""
    root = Path(tempfile.mkdtemp())
    try:
        src = root / "data.csv"
        src.write_text(_csv_text([["note", "kind", "label"]] + [list(row) for row in rows]), encoding="utf-8",
                       newline="")
        schema = root / "schema.json"
        schema.write_text(json.dumps({"columns": [{"name": "kind", "type": "category"}]}))
        dst = root / "dst"
        shardkit.convert(str(src), str(dst), format=fmt, label_column="label", text_columns=["note"],
                         schema_file=str(schema), quiet=True, samples_per_shard=7)
        ds = shardkit.open_dataset(str(dst), as_dict=True)
        assert len(ds) == len(rows)
        vocabulary = ds.vocabularies["kind"]
        assert vocabulary == sorted({kind for _, kind, _ in rows if not documented_missing(kind)})
        for index, (note, kind, label) in enumerate(rows):
            row = ds[index]
            assert row["note"] == note
            assert row["label"] == label
            code = int(row["kind"])
            assert (vocabulary[code] if code >= 0 else None) == (None if documented_missing(kind) else kind)
    finally:
        shutil.rmtree(root)
