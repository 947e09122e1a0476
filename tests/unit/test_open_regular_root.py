"""open_regular keeps each root's real path and resolves it again only when the root names another
directory; a file whose real path leaves the root is refused whatever was seen before."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardkit.integrity import NotAShardFile, open_regular


def _file(path: Path, data: bytes = b"12345") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_a_link_out_of_the_root_is_refused_after_the_root_was_seen(tmp_path: Path) -> None:
    root = tmp_path / "data"
    os.close(open_regular(_file(root / "shards" / "a"), root, 5))          # the root is known now
    _file(tmp_path / "data2" / "b")
    (root / "away").symlink_to(tmp_path / "data2")                          # a sibling sharing the prefix
    with pytest.raises(NotAShardFile, match="lies outside"):
        open_regular(root / "away" / "b", root, 5)
    (root / "up").symlink_to(tmp_path)
    with pytest.raises(NotAShardFile, match="lies outside"):
        open_regular(root / "up" / "data2" / "b", root, 5)


def test_a_root_that_names_another_directory_is_resolved_again(tmp_path: Path) -> None:
    first, second, root = tmp_path / "first", tmp_path / "second", tmp_path / "current"
    _file(first / "shard")
    _file(second / "shard", b"1234567")
    root.symlink_to(first)
    os.close(open_regular(root / "shard", root, 5))
    root.unlink()
    root.symlink_to(second)                                                 # re-pointed, as a release link is
    os.close(open_regular(root / "shard", root, 7))
