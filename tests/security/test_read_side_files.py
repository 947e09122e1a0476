"""The read side opens shards only as regular files inside DST: a shard replaced by a link (to
/dev/zero, or to an intact copy elsewhere) or by a FIFO is reported, never followed or waited on."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from tests.faults.helpers import cli_env
from tests.security.crafted import one_image_dataset

CHECK = ("import sys, shardkit\nfor mode in ('quick', 'full', 'deep'):\n"
         "    report = shardkit.verify(sys.argv[1], mode=mode)\n"
         "    print(mode, [(p.kind, p.message) for p in report.problems])\n"
         "for checks in (False, 'full'):\n    try:\n"
         "        shardkit.open_dataset(sys.argv[1], verify_checksums=checks)[0]\n"
         "        print('read', checks, 'ok')\n"
         "    except shardkit.ShardkitError as exc:\n        print('read', checks, 'refused:', exc)\n")


def to_dev_zero(shard: Path, tmp: Path) -> None:
    shard.unlink()
    shard.symlink_to("/dev/zero")


def to_outside_copy(shard: Path, tmp: Path) -> None:
    copy = tmp / "elsewhere.bin"
    shutil.copyfile(shard, copy)
    shard.unlink()
    shard.symlink_to(copy)


def to_fifo(shard: Path, tmp: Path) -> None:
    shard.unlink()
    os.mkfifo(shard)


@pytest.mark.parametrize("replace", [to_dev_zero, to_outside_copy, to_fifo])
def test_links_and_special_files_are_refused_without_hanging(tmp_path: Path, replace: Callable) -> None:
    dst = one_image_dataset(tmp_path, "pt")
    shard = dst / "shards" / "shard-00000.pt"
    replace(shard, tmp_path)
    result = subprocess.run([sys.executable, "-c", CHECK, str(dst)], env=cli_env(), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for line in lines[:3]:
        assert "('structure'" in line and "shard-00000.pt" in line and "regular file" in line, line
    assert [line.split(":")[0] for line in lines[3:]] == ["read False refused", "read full refused"]
    assert all(str(shard) in line and "regular file" in line for line in lines[3:]), lines


def test_a_linked_shards_folder_leading_outside_dst_is_refused(tmp_path: Path) -> None:
    """The shard itself is a regular file of the right size and hash; only the folder on its way
    is a link out of DST. (Mutation: open_regular without its inside-DST check: this fails.)"""
    dst = one_image_dataset(tmp_path, "pt")
    outside = tmp_path / "elsewhere"
    (dst / "shards").rename(outside)
    (dst / "shards").symlink_to(outside, target_is_directory=True)
    result = subprocess.run([sys.executable, "-c", CHECK, str(dst)], env=cli_env(), capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for line in lines[:3]:
        assert "('structure'" in line and "lies outside" in line, line
    assert [line.split(":")[0] for line in lines[3:]] == ["read False refused", "read full refused"]
    assert all("lies outside" in line for line in lines[3:]), lines


def test_links_that_stay_inside_dst_and_a_linked_dst_are_read(tmp_path: Path) -> None:
    """A shards folder linked to another folder inside DST, and DST itself reached through a link
    (the location is trusted, not what is in it), read as usual."""
    import shardkit
    dst = one_image_dataset(tmp_path, "pt")
    (dst / "shards").rename(dst / "kept")
    (dst / "shards").symlink_to(dst / "kept", target_is_directory=True)
    linked = tmp_path / "linked-dst"
    linked.symlink_to(dst, target_is_directory=True)
    for root in (dst, linked):
        assert shardkit.verify(str(root), mode="full").ok
        with shardkit.open_dataset(str(root), decode=None, verify_checksums="full") as ds:
            assert bytes(ds[0][0]) == (tmp_path / "src" / "cls" / "a.png").read_bytes()
