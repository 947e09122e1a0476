"""A class folder whose name is not UTF-8 is refused during the scan, in one line, before
anything is written; --resume says the same."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from shardkit.cli import main


@pytest.fixture
def latin1_tree(image_tree: Path, tmp_path: Path) -> Path:
    src = tmp_path / "src"
    shutil.copytree(image_tree, src)
    folder = os.path.join(os.fsencode(src), b"caf\xe9")
    try:
        os.mkdir(folder)
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    first = next(image_tree.rglob("*.png"))
    shutil.copy(first, os.fsdecode(os.path.join(folder, b"one.png")))
    return src


@pytest.mark.parametrize("extra", [[], ["--resume"]])
def test_non_utf8_class_folder_is_refused_before_writing(extra, latin1_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "dst"
    result = CliRunner().invoke(main, ["convert", str(latin1_tree), str(dst), "-q", *extra])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert "caf\\xe9: class folder name is not UTF-8" in result.output
    assert not dst.exists()


def test_non_utf8_image_name_inside_a_class_is_fine(image_tree: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    shutil.copytree(image_tree, src)
    first = next((src / "circle").rglob("*.png"))
    os.rename(first, os.path.join(os.fsencode(first.parent), b"\xff.png"))
    result = CliRunner().invoke(main, ["convert", str(src), str(tmp_path / "dst"), "-q"])
    assert result.exit_code == 0, result.output
