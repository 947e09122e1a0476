"""Undecodable inputs are skipped and listed (or fatal with --on-error fail); good ones are kept."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.samples import make_image_tree


@pytest.fixture
def tree_with_bad_files(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    written = make_image_tree(str(src), num_images=16, seed=2, jpeg_fraction=1.0)
    jpeg = (src / written[0]).read_bytes()
    (src / "circle" / "truncated.jpg").write_bytes(jpeg[: len(jpeg) * 2 // 3])
    (src / "square" / "empty.png").write_bytes(b"")
    (src / "square" / "text.jpg").write_text("just text")
    return src


def test_bad_files_are_skipped_and_listed(tree_with_bad_files: Path, tmp_path: Path, fmt: str) -> None:
    dst = tmp_path / "dst"
    report = shardkit.convert(str(tree_with_bad_files), str(dst), format=fmt, quiet=True)
    assert report.num_samples == 16 and report.skipped == 3
    lines = [json.loads(line) for line in (dst / "skipped.jsonl").read_text().splitlines()]
    reasons = {line["path"]: line["reason"] for line in lines}
    assert set(reasons) == {"circle/truncated.jpg", "square/empty.png", "square/text.jpg"}
    assert "does not decode" in reasons["circle/truncated.jpg"]
    assert "empty file" in reasons["square/empty.png"]
    assert "not an image" in reasons["square/text.jpg"]
    assert shardkit.verify(str(dst), mode="deep").ok


def test_on_error_fail_and_max_errors(tree_with_bad_files: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    # in source order the first bad input is circle/truncated.jpg
    result = runner.invoke(main, ["convert", str(tree_with_bad_files), str(tmp_path / "a"), "--on-error", "fail", "-q",
                                  "--order", "source"])
    assert result.exit_code == 1
    assert "truncated.jpg" in result.output and "--on-error fail" in result.output
    assert not (tmp_path / "a" / "manifest.json").exists()
    result = runner.invoke(main, ["convert", str(tree_with_bad_files), str(tmp_path / "b"), "--max-errors", "2", "-q"])
    assert result.exit_code == 1 and "more than 2" in result.output
    assert not (tmp_path / "b" / "manifest.json").exists()
    result = runner.invoke(main, ["convert", str(tree_with_bad_files), str(tmp_path / "c"), "--max-errors", "3", "-q"])
    assert result.exit_code == 0 and "skipped 3" in result.output
