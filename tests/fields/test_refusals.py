"""What a dataset of named fields is refused by, with one line naming it: duplicates (which compares
one stored payload per sample) and re-sharding of a dataset as SRC (format changes and filtered
copies: --classes, --keys, --fraction), which copies one record per sample."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.errors import UsageError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


@pytest.mark.parametrize("args", [["duplicates"], ["duplicates", "--pixels"]])
def test_duplicates_refuses_a_dataset_of_fields(args: list, dataset_dir: Path) -> None:
    """Mutation: removing the check in duplicates() fails this test (an AttributeError deep inside)."""
    fields = str(GOLDEN / "hdf5-v3-fields")
    result = CliRunner().invoke(main, [*args, str(dataset_dir), fields])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: {fields}: holds samples of named fields; duplicates compares datasets of one "
                     "payload per sample"]
    with pytest.raises(UsageError, match="named fields"):
        shardkit.duplicates([fields])


@pytest.mark.parametrize("options", [[], ["--classes", "cat"], ["--fraction", "0.5"], ["--format", "pt"]])
def test_re_sharding_refuses_a_dataset_of_fields(options: list, tmp_path: Path) -> None:
    """Format changes and filtered copies take one payload per sample; nothing is written to DST.
    Mutation: removing the check in ShardDatasetSource.open fails this test."""
    src = str(GOLDEN / "lmdb-v2-fields")
    result = CliRunner().invoke(main, ["convert", src, str(tmp_path / "copy"), *options, "--quiet"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: {src}: holds samples of named fields; a dataset is re-sharded, converted to another format or "
        "copied filtered only when it holds one payload per sample"]
    assert not (tmp_path / "copy").exists()
