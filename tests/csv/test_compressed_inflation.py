"""A compressed table may inflate only so far: a decompression bomb stops with one line naming the
file, before it fills TMPDIR and DST; --max-inflation raises or lifts the limit."""
from __future__ import annotations

import gzip

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.sources.tabular import files


@pytest.fixture
def bomb(tmp_path, monkeypatch):
    """4 MB of '0,0' rows in about 4 KB of gzip (1000x), with the limit's floor lowered to 1 MiB."""
    monkeypatch.setattr(files, "MIN_INFLATED_BYTES", 1 << 20)
    path = tmp_path / "bomb.csv.gz"
    path.write_bytes(gzip.compress(b"x,label\n" + b"0,0\n" * 1_000_000, 9))
    return path


def test_a_bomb_stops_with_one_line_naming_the_file(bomb, tmp_path):
    result = CliRunner().invoke(main, ["convert", str(bomb), str(tmp_path / "dst"), "--label-column", "label",
                                       "--workers", "1", "-q"])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert f"{bomb}: inflates to more than 1,048,576 bytes" in result.output
    assert "--max-inflation" in result.output
    assert not (tmp_path / "dst" / "manifest.json").exists()


def test_max_inflation_lets_a_known_large_ratio_through(bomb, tmp_path):
    for ratio in (0, 2000):
        report = shardkit.convert(str(bomb), str(tmp_path / f"dst{ratio}"), label_column="label", workers=1,
                                  quiet=True, max_inflation=ratio)
        assert report.num_samples == 1_000_000


def test_a_negative_ratio_is_a_usage_error(bomb, tmp_path):
    result = CliRunner().invoke(main, ["convert", str(bomb), str(tmp_path / "dst"), "--label-column", "label",
                                       "--max-inflation", "-1", "-q"])
    assert result.exit_code == 2 and "--max-inflation" in result.output


def test_bad_row_lines_are_found_through_the_counted_stream(tmp_path, read_skipped):
    """A ragged row in a .csv.gz: its line is counted by re-reading the (limited) decompressed stream."""
    src = tmp_path / "bad.csv.gz"
    src.write_bytes(gzip.compress(b"x,label\n1,0\n2\n3,1\n"))
    report = shardkit.convert(str(src), str(tmp_path / "dst"), label_column="label", workers=1, quiet=True)
    assert report.num_samples == 2
    assert [(entry["line"], entry["reason"]) for entry in read_skipped(tmp_path / "dst")] == [
        (3, "row has 1 fields, the header has 2")]
