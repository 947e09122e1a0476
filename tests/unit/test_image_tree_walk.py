"""The image tree's walk gives every file once, in the order the conversion plans (component by
component), without sorting the whole tree, and cuts directory link loops."""
from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit.sources.tree import has_extension, walk_files

#: Names whose string order differs from their order as path components ("a-b" < "a/b" as
#: strings, but the folder "a" comes before the file "a-b" component by component).
TRICKY = ["a", "a-b", "a.b", "a0", "A", "b", "é", "ß", "z z", ".hidden", "~x", "a_b"]


def _by_components(paths: list) -> list:
    return sorted(paths, key=lambda rel: rel.split("/"))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(TRICKY), min_size=1, max_size=4), min_size=1, max_size=25))
def test_walk_gives_every_file_once_in_component_order(tmp_path_factory, chains: list) -> None:
    root = tmp_path_factory.mktemp("walk")
    files = set()
    for chain in chains:
        *folders, name = chain
        folder = root.joinpath(*folders) if folders else root
        if any(root.joinpath(*chain[:depth]).is_file() for depth in range(1, len(chain))) \
                or (folder / name).is_dir():
            continue                        # a name already taken by the other kind of entry
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(b"x")
        files.add("/".join(chain))
    walked = list(walk_files(str(root)))
    assert walked == _by_components(sorted(files))


def test_a_directory_link_loop_is_walked_once(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "x.jpg").write_bytes(b"x")
    os.symlink("..", tmp_path / "a" / "b" / "up")          # a/b/up -> a: a loop
    os.symlink("a", tmp_path / "link")                     # link -> a: the same folder again
    walked = list(walk_files(str(tmp_path)))
    assert walked == ["a/b/x.jpg"]                          # "a" sorts before "link": it is walked


def test_has_extension_follows_splitext() -> None:
    extensions = frozenset({".jpg", ".png"})
    for rel in ["a.jpg", "d/a.JPG", "d.jpg/a", ".jpg", "d/.jpg", "..jpg", "d/..png", "a.b.png", "a.jpeg", "a",
                "d.x/a.png", ".a.jpg"]:
        name = rel.rsplit("/", 1)[-1]
        assert has_extension(rel, extensions) == (os.path.splitext(name)[1].lower() in extensions), rel
