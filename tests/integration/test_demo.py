"""The README's demo runs end to end (on fewer images) and reports a throughput."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from shardkit.cli import main


def test_demo_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path), "--images", "48"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "OK: 1 shards, 48 samples checked" in result.output
    assert "read 48 samples (12 circle, 12 square, 12 stripes, 12 triangle) at" in result.output
    assert (tmp_path / "dataset-hdf5" / "manifest.json").is_file()
