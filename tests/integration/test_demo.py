"""The README's demo runs end to end (on fewer images) and reports a throughput."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

import shardkit
import shardkit.ops.demo
from shardkit.cli import main
from shardkit.cli.demo_cmd import command as demo_command
from shardkit.ops.demo import tree_folder

REPO = Path(__file__).resolve().parents[2]


def test_demo_command(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path), "--images", "48"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "OK: 1 shards, 48 samples checked" in result.output
    assert "read 48 samples (12 circle, 12 square, 12 stripes, 12 triangle) at" in result.output
    assert "batches of (32, 3, 64, 64)" in result.output      # a full batch's shape, not the last (16)
    assert (tmp_path / "dataset-hdf5" / "manifest.json").is_file()
    assert (Path(tree_folder(str(tmp_path), 48)) / "circle").is_dir()


def test_demo_reused_folder_follows_images_and_says_deep(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(main, ["demo", "--dir", str(tmp_path), "--images", "8"]).exit_code == 0
    result = runner.invoke(main, ["demo", "--dir", str(tmp_path), "--images", "12"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "12 samples checked" in result.output and "read 12 samples" in result.output
    assert "shardkit verify" in result.output and " --deep" in result.output


def test_demo_refuses_zero_images(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["demo", "--dir", str(tmp_path), "--images", "0"])
    assert result.exit_code == 2 and "no such file" not in result.output
    assert "--images" in result.output and result.output.count("\n") == 1
    with pytest.raises(shardkit.UsageError, match="at least 1"):
        shardkit.ops.demo.run_demo(str(tmp_path), images=0)


def test_the_docs_name_the_folder_the_demo_draws() -> None:
    """A page that runs `shardkit demo --dir D [--images N]` and then names D/images... names the
    folder the demo really drew (one per image count), so its next command runs as written."""
    default = next(param.default for param in demo_command.params if param.name == "images")
    checked = 0
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text()
        for match in re.finditer(r"shardkit demo --dir (\S+?)(?: --images (\d+))?[`\s]", text):
            workdir, images = match.group(1), int(match.group(2) or default)
            for named in re.findall(re.escape(workdir) + r"/images[\w-]*", text):
                assert named == tree_folder(workdir, images), f"{page.name} names {named} after {match.group(0)!r}"
                checked += 1
    assert checked >= 3
