"""What a dataset of named fields is refused by, with one line naming it: duplicates --pixels (which
decodes one image per sample)."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main
from shardkit.errors import UsageError

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def test_duplicates_pixels_refuses_a_dataset_of_fields(dataset_dir: Path) -> None:
    """--pixels decodes one image per sample; a dataset of fields is compared by its stored bytes.
    Mutation: removing the check in duplicates() fails this test (an error deep inside)."""
    fields = str(GOLDEN / "hdf5-v3-fields")
    result = CliRunner().invoke(main, ["duplicates", "--pixels", str(dataset_dir), fields])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: {fields}: --pixels compares the images of datasets of one image per sample; this "
                     "one holds samples of named fields (compared by their stored bytes)"]
    with pytest.raises(UsageError, match="named fields"):
        shardkit.duplicates([fields], pixels=True)
