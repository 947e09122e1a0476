"""Faults around `convert NEW_SRC DST --append` and `repair` of a dataset of named fields converted
from a sidecar tree: kill -9 at fixed points of an append, and a SRC that changed under a repair."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Tuple

import pytest

import shardkit
from tests.fields.conftest import png_bytes
from tests.fields.test_sources import sidecar_tree

from .helpers import EPOCH, assert_no_traceback, error_lines, kill_append_and_rerun, run_cli, tree_bytes


def _trees(tmp_path: Path) -> Tuple[Path, Path]:
    """SRC (10 samples) and NEW_SRC: SRC's files again and 6 new samples."""
    old, new = tmp_path / "old", tmp_path / "new"
    sidecar_tree(old, 10)
    shutil.copytree(old, new)
    (new / "c").mkdir()
    for number in range(6):
        (new / "c" / f"{number:04d}.png").write_bytes(png_bytes(700 + number))
        (new / "c" / f"{number:04d}.txt").write_bytes(f"new caption {number}".encode())
        (new / "c" / f"{number:04d}.cls").write_bytes(b"emu")
    return old, new


def _converted(old: Path, dst: Path) -> None:
    shardkit.convert(old, dst, sidecars=True, label_field="cls", samples_per_shard=4)


@pytest.mark.parametrize("point", ["shard-written", "append-publish"])
def test_kill_9_during_a_fields_append_keeps_the_old_dataset_and_a_rerun_finishes_it(
        tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH["SOURCE_DATE_EPOCH"])
    old, new = _trees(tmp_path)
    dst = kill_append_and_rerun(lambda dst: _converted(old, dst), new, tmp_path, point, "shard-00004.png.h5",
                                old_samples=10)
    assert len(shardkit.open_dataset(dst)) == 16


def test_cli_repair_of_fields_from_a_changed_src_exits_1_in_one_line(tmp_path: Path) -> None:
    old, _ = _trees(tmp_path)
    dst = tmp_path / "dst"
    _converted(old, dst)
    with shardkit.open_dataset(dst) as ds:
        key = ds.key(ds.manifest.shards[2].first_index)
    for path in (dst / "shards").glob("shard-00002.*"):
        path.unlink()
    before = tree_bytes(dst)
    (old / f"{key}.txt").write_bytes(b"edited since")
    result = run_cli("repair", dst, "--from", old)
    assert result.returncode == 1
    assert_no_traceback(result)
    [line] = error_lines(result)
    assert "shard 2 (shards/shard-00002." in line and repr(key) in line and "left as they were" in line, line
    assert tree_bytes(dst) == before
