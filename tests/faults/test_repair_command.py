"""`shardkit repair DST --from SRC`: the shards verify finds missing or damaged are written again from
SRC (a copy elsewhere, with other mtimes) with the options the manifest records, byte-identical,
proven by the manifest's sha256; a SRC that no longer holds the same inputs is refused naming the
keys that differ, with DST untouched; a repair killed between two renames leaves every shard as it
was or repaired, and a second repair finishes it.

Mutations caught here: renaming each rebuilt shard into place before comparing it with the manifest
(the refusal test finds DST changed); the plan stamping SRC's own identity instead of the dataset's
(a copy of SRC has other mtimes, so the rebuilt shard differs and the repair is refused)."""
from __future__ import annotations

import json
import os
import shutil
import signal
from pathlib import Path

import pytest

import shardkit
from shardkit.errors import ConversionError

from .crafting import forge_manifest
from .helpers import (assert_no_traceback, error_lines, flip_bit, make_tiny_tree, run_cli, shard_paths,
                      tree_bytes)

SAMPLES = 12
PER_SHARD = 4


def _converted(tmp_path: Path, fmt: str = "hdf5") -> "tuple[Path, Path, dict]":
    """SRC, DST converted from it (in source order, so shard 0 holds SRC's first four files), DST's bytes."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    make_tiny_tree(src, SAMPLES, seed=5)
    shardkit.convert(src, dst, format=fmt, samples_per_shard=PER_SHARD, workers=1, order="source",
                     image_mode="png", resize=8)
    return src, dst, tree_bytes(dst)


def _moved_copy(src: Path, where: Path) -> Path:
    """SRC copied elsewhere without its times: another path and other mtimes, the same inputs."""
    shutil.copytree(src, where, copy_function=shutil.copyfile)
    return where


@pytest.mark.parametrize("fmt", ["hdf5", "lmdb", "pt"])
def test_repair_from_a_moved_copy_is_byte_identical(tmp_path: Path, fmt: str) -> None:
    src, dst, expected = _converted(tmp_path, fmt)
    shards = shard_paths(dst)
    shards[0].unlink()
    flip_bit(shards[2], os.path.getsize(shards[2]) // 2, 5)
    assert not shardkit.verify(dst).ok
    copy = _moved_copy(src, tmp_path / "elsewhere")
    report = shardkit.repair(dst, copy)
    assert (report.shards_written, report.num_shards) == (2, len(shards))
    assert [line.split(" ")[0] for line in report.repaired] == [f"shards/{shards[0].name}", f"shards/{shards[2].name}"]
    assert tree_bytes(dst) == expected
    assert shardkit.verify(dst).ok
    again = shardkit.repair(dst, copy)
    assert (again.shards_written, again.repaired) == (0, [])


def test_cli_repair_reports_and_exits_zero(tmp_path: Path) -> None:
    src, dst, expected = _converted(tmp_path)
    shard_paths(dst)[1].unlink()
    result = run_cli("repair", dst, "--from", src, "--quiet")
    assert result.returncode == 0, result.stderr
    assert "repaired: shards/shard-00001.h5 was missing; written again" in result.stdout
    assert "1 of 3 shards written again" in result.stdout
    assert tree_bytes(dst) == expected
    as_json = json.loads(run_cli("repair", dst, "--from", src, "--json").stdout)
    assert (as_json["shards_written"], as_json["num_shards"]) == (0, 3)


def _edit(path: Path) -> None:
    """Another picture under the same name."""
    from PIL import Image
    Image.new("RGB", (9, 9), (200, 10, 10)).save(path, "PNG" if path.suffix == ".png" else "JPEG")


def test_a_changed_input_is_refused_naming_its_key_and_dst_is_untouched(tmp_path: Path) -> None:
    src, dst, _ = _converted(tmp_path)
    flip_bit(shard_paths(dst)[0], os.path.getsize(shard_paths(dst)[0]) // 2, 1)
    before = tree_bytes(dst)
    copy = _moved_copy(src, tmp_path / "copy")
    _edit(copy / "class0" / "00003.png")
    result = run_cli("repair", dst, "--from", copy)
    assert result.returncode == 1
    assert_no_traceback(result)
    lines = error_lines(result)
    assert len(lines) == 1 and "shard 0 (shards/shard-00000.h5) cannot be rebuilt from SRC" in lines[0]
    assert "changed in SRC: 'class0/00003.png'" in lines[0] and "nothing was changed" in lines[0]
    assert tree_bytes(dst) == before
    assert not [name for name in os.listdir(dst / "shards") if name.startswith(".")]


def test_a_missing_input_is_refused_naming_its_key(tmp_path: Path) -> None:
    src, dst, _ = _converted(tmp_path)
    flip_bit(shard_paths(dst)[0], os.path.getsize(shard_paths(dst)[0]) // 2, 1)
    before = tree_bytes(dst)
    copy = _moved_copy(src, tmp_path / "copy")
    (copy / "class0" / "00000.png").unlink()
    with pytest.raises(ConversionError, match=r"missing from SRC: 'class0/00000\.png'"):
        shardkit.repair(dst, copy)
    assert tree_bytes(dst) == before


def test_a_manifest_without_recorded_options_is_refused(tmp_path: Path) -> None:
    src, dst, _ = _converted(tmp_path)
    forge_manifest(dst, lambda data: data["source"].pop("options"))
    shard_paths(dst)[0].unlink()
    result = run_cli("repair", dst, "--from", src)
    assert result.returncode == 2
    assert error_lines(result) == [f"error: {dst}: the manifest records no conversion options (written by an "
                                   "older shardkit); repair it with `shardkit convert SRC DST --resume` and "
                                   "the options it was converted with"]


@pytest.mark.parametrize("command", ["repair", "append"])
def test_a_dataset_written_by_the_writer_is_refused_for_what_it_is(tmp_path: Path, command: str) -> None:
    """A dataset of named fields written by shardkit.Writer has no conversion to replay: repair and --append say so, and
    DST is untouched."""
    src = tmp_path / "src"
    make_tiny_tree(src, 6)
    dst = tmp_path / "fields"
    shardkit.write([{"text": f"t{n}"} for n in range(5)], dst, {"text": "text"})
    before = tree_bytes(dst)
    args = ("repair", dst, "--from", src) if command == "repair" else ("convert", src, dst, "--append")
    result = run_cli(*args)
    assert result.returncode == 2
    assert_no_traceback(result)
    [line] = error_lines(result)
    assert line.startswith(f"error: {dst}: a dataset of named fields written by shardkit.Writer has no SRC"), line
    assert tree_bytes(dst) == before


def test_repair_of_a_path_that_is_no_dataset_is_a_usage_error(tmp_path: Path) -> None:
    src, dst, _ = _converted(tmp_path)
    assert run_cli("repair", tmp_path / "nothing", "--from", src).returncode == 2
    assert run_cli("repair", dst).returncode == 2                # --from is required


def test_a_repair_killed_between_renames_leaves_no_half_state_and_a_second_finishes(tmp_path: Path) -> None:
    src, dst, expected = _converted(tmp_path)
    shards = shard_paths(dst)
    for shard in shards[:2]:
        flip_bit(shard, os.path.getsize(shard) // 2, 2)
    damaged = tree_bytes(dst)
    marker = tmp_path / "killed"
    result = run_cli("repair", dst, "--from", src, "--quiet",
                     env_extra={"SHARDKIT_TEST_KILL_AT": f"repair-replace:shards/{shards[1].name}:{marker}"})
    assert result.returncode == -signal.SIGKILL and marker.exists()
    now = tree_bytes(dst, skip=(".shardkit",))
    assert now[f"shards/{shards[0].name}"] == expected[f"shards/{shards[0].name}"]   # renamed before the kill
    assert now[f"shards/{shards[1].name}"] == damaged[f"shards/{shards[1].name}"]   # as it was
    assert {name for name in now if not name.startswith("shards/.")} == set(expected)
    named = [problem.shard for problem in shardkit.verify(dst).problems]
    assert [name for name in named if not name.startswith("shards/.")] == [f"shards/{shards[1].name}"]
    assert run_cli("repair", dst, "--from", src, "--quiet").returncode == 0
    assert tree_bytes(dst) == expected
