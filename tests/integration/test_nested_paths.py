"""DST inside SRC, or SRC inside DST, is refused for every source kind: exit 2, nothing written."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import List, Tuple

import pytest
from click.testing import CliRunner

import shardkit
from shardkit.cli import main


def _listing(root: Path) -> List[Tuple[str, int]]:
    return sorted((str(path.relative_to(root)), path.stat().st_size if path.is_file() else -1)
                  for path in root.rglob("*"))


def _image_tree(base: Path, image_tree: Path) -> Tuple[Path, List[str]]:
    src = base / "images"
    shutil.copytree(image_tree, src)
    return src, []


def _labels_tree(base: Path, image_tree: Path) -> Tuple[Path, List[str]]:
    src = base / "flat"
    src.mkdir()
    rows = ["path,label"]
    for number, image in enumerate(sorted(image_tree.rglob("*.jpg"))[:6]):
        shutil.copy(image, src / f"{number}.jpg")
        rows.append(f"{number}.jpg,{'cat' if number % 2 else 'dog'}")
    labels = base / "labels.csv"
    labels.write_text("\n".join(rows) + "\n")
    return src, ["--labels", str(labels)]


def _csv_table(base: Path, image_tree: Path) -> Tuple[Path, List[str]]:
    src = base / "table"
    src.mkdir()
    (src / "rows.csv").write_text("a,b,y\n" + "".join(f"{i},{i * 2},{i % 3}\n" for i in range(20)))
    return src, ["--label-column", "y"]


def _shard_dataset(base: Path, image_tree: Path) -> Tuple[Path, List[str]]:
    src = base / "dataset"
    shardkit.convert(str(image_tree), str(src), samples_per_shard=40, quiet=True)
    return src, []


SOURCES = {"image_tree": _image_tree, "labels_csv": _labels_tree, "csv_table": _csv_table,
           "shard_dataset": _shard_dataset}


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize("extra", [[], ["--overwrite"], ["--resume"]])
def test_dst_inside_src_is_refused(kind: str, extra: List[str], image_tree: Path, tmp_path: Path) -> None:
    src, options = SOURCES[kind](tmp_path, image_tree)
    before = _listing(src)
    dst = src / "inside" / "out"
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "-q", *options, *extra])
    assert result.exit_code == 2, result.output
    assert "inside SRC" in result.output and result.output.count("\n") == 1
    assert _listing(src) == before


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_src_inside_dst_is_refused_even_with_overwrite(kind: str, image_tree: Path, tmp_path: Path) -> None:
    dst = tmp_path / "outer"
    dst.mkdir()
    src, options = SOURCES[kind](dst, image_tree)
    before = _listing(dst)
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "-q", "--overwrite", *options])
    assert result.exit_code == 2, result.output
    assert "DST holds SRC" in result.output
    assert _listing(dst) == before


def test_a_link_does_not_hide_dst_inside_src(image_tree: Path, tmp_path: Path) -> None:
    src, _ = _image_tree(tmp_path, image_tree)
    os.symlink(src, tmp_path / "alias")
    before = _listing(src)
    with pytest.raises(shardkit.UsageError, match="inside SRC"):
        shardkit.convert(str(tmp_path / "alias"), str(src / "out"), quiet=True)
    with pytest.raises(shardkit.UsageError, match="inside SRC"):
        shardkit.convert(str(src), str(tmp_path / "alias" / "out"), quiet=True)
    assert _listing(src) == before


def test_dst_holding_the_labels_csv_is_refused(image_tree: Path, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    src, options = _labels_tree(tmp_path / "a", image_tree)
    dst = tmp_path / "b"
    dst.mkdir()
    labels = dst / "labels.csv"
    shutil.move(options[1], labels)
    result = CliRunner().invoke(main, ["convert", str(src), str(dst), "-q", "--overwrite", "--labels", str(labels)])
    assert result.exit_code == 2 and "DST holds the labels CSV" in result.output, result.output
    assert labels.is_file() and [path.name for path in dst.iterdir()] == ["labels.csv"]


def test_sibling_with_common_prefix_is_fine(image_tree: Path, tmp_path: Path) -> None:
    src, _ = _image_tree(tmp_path, image_tree)
    report = shardkit.convert(str(src), str(tmp_path / "images-out"), quiet=True)
    assert report.num_samples == 120
