"""Nothing outside DST is written or deleted through symbolic links planted in DST, and temporary
files get unpredictable names, created exclusively without following links."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict

import pytest

import shardkit
from shardkit.errors import UsageError
from shardkit.integrity import atomic_write_bytes, create_new, temp_path
from tests.security.crafted import png_bytes


def source(tmp_path: Path) -> Path:
    src = tmp_path / "src" / "cls"
    src.mkdir(parents=True)
    for number in range(3):
        (src / f"{number}.png").write_bytes(png_bytes(colour=(number, 0, 0)))
    return tmp_path / "src"


def victim(tmp_path: Path) -> Dict[Path, bytes]:
    """A folder outside DST with files named like shardkit's own; returns path -> content."""
    folder = tmp_path / "victim"
    (folder / "done").mkdir(parents=True)
    files = {folder / "shard-00000.h5": b"precious shard", folder / ".notes.tmp": b"precious notes",
             folder / "done" / "keep.txt": b"precious record", folder / "lock": b"precious lock"}
    for path, content in files.items():
        path.write_bytes(content)
    return files


@pytest.mark.parametrize("link", ["shards", ".shardkit"])
@pytest.mark.parametrize("mode", ["overwrite", "resume"])
def test_linked_own_folders_are_refused_and_left_alone(tmp_path: Path, link: str, mode: str) -> None:
    files = victim(tmp_path)
    dst = tmp_path / "dst"
    dst.mkdir()
    (dst / link).symlink_to(tmp_path / "victim", target_is_directory=True)
    with pytest.raises(UsageError, match=f"{link}: is a symbolic link"):
        shardkit.convert(str(source(tmp_path)), str(dst), format="hdf5", quiet=True, **{mode: True})
    assert {path: path.read_bytes() for path in files} == files
    assert sorted(os.listdir(tmp_path / "victim")) == [".notes.tmp", "done", "lock", "shard-00000.h5"]


def test_a_link_at_the_old_predictable_temp_name_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "victim.txt"
    target.write_bytes(b"precious")
    dst = tmp_path / "dst"
    (dst / ".shardkit").mkdir(parents=True)
    (dst / ".shardkit" / f".plan.json.tmp-{os.getpid()}").symlink_to(target)
    shardkit.convert(str(source(tmp_path)), str(dst), format="pt", quiet=True, resume=True)
    assert target.read_bytes() == b"precious"
    assert shardkit.verify(str(dst)).ok


def test_temporary_names_are_unpredictable_and_created_exclusively(tmp_path: Path) -> None:
    final = tmp_path / "manifest.json"
    names = {temp_path(final).name for _ in range(20)}
    assert len(names) == 20 and all(name.startswith(".manifest.json.tmp-") for name in names)
    target = tmp_path / "victim.txt"
    target.write_bytes(b"precious")
    planted = tmp_path / "planted"
    planted.symlink_to(target)
    with pytest.raises(OSError):
        os.close(create_new(planted))
    atomic_write_bytes(final, b"{}")
    assert target.read_bytes() == b"precious" and final.read_bytes() == b"{}"


def test_resume_of_a_finished_dataset_whose_shards_folder_links_out_is_refused(tmp_path: Path) -> None:
    """A complete DST whose shards/ was turned into a link to a folder outside DST: resume reads
    nothing through it and reports nothing reused (it used to say "1 reused", exit 0)."""
    src = source(tmp_path)
    dst = tmp_path / "dst"
    shardkit.convert(str(src), str(dst), format="hdf5")
    outside = tmp_path / "outside"
    (dst / "shards").rename(outside)
    (dst / "shards").symlink_to(outside, target_is_directory=True)
    before = {path.name: path.read_bytes() for path in outside.iterdir()}
    with pytest.raises(UsageError, match="shards: is a symbolic link"):
        shardkit.convert(str(src), str(dst), format="hdf5", resume=True)
    assert {path.name: path.read_bytes() for path in outside.iterdir()} == before
