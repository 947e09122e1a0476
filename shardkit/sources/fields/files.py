"""The files a sidecar tree groups into samples, wherever they lie: a local folder (read only
inside it, links out of it never followed), or the members of a tar / zip archive and the objects
below a URL (sources/member_trees.py: a WebDataset tar, a tar of such tars, a bucket's prefix).

Both list their files once (relative POSIX paths, sorted component by component) and read a batch
of them, each as its bytes or the SampleError that makes its sample a skipped input.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Union

from ...errors import SampleError
from ..archives import STREAMED
from ..base import Skipped
from ..member_trees import MemberTree
from ..tree import LinkOut, read_inside, walk_files

#: One file read: its bytes, or why it cannot be read.
FileRead = Union[bytes, SampleError]


class SampleFiles:
    """The files below SRC: `rels`, the `skipped` ones (unsafe, or links out), `read_many(rels)`."""

    rels: List[str]
    skipped: List[Skipped]
    #: How the manifest's source record and messages name SRC.
    shown: str

    def read_many(self, rels: List[str]) -> List[FileRead]:
        """Each file's bytes (or SampleError), in the order asked."""
        raise NotImplementedError


class FolderFiles(SampleFiles):
    """The files of a local folder; a link is followed only where it stays inside the folder."""

    def __init__(self, root: str) -> None:
        links: List[LinkOut] = []
        self.root, self.real_root, self.shown = root, os.path.realpath(root), os.path.abspath(root)
        self.rels = list(walk_files(root, links))
        self.skipped = [Skipped(link.path, link.reason()) for link in links]

    def read_many(self, rels: List[str]) -> List[FileRead]:
        return [self._read(rel) for rel in rels]

    def _read(self, rel: str) -> FileRead:
        path = os.path.join(self.root, rel)
        try:
            return read_inside(self.real_root, path, link=os.path.islink(path))
        except OSError as exc:
            return SampleError(f"cannot be read ({exc.strerror or exc})")
        except SampleError as exc:
            return exc


class MemberFiles(SampleFiles):
    """The members of an archive or the objects below a URL. Members of a compressed archive
    (tar.gz, tar.bz2, tar.xz), which cannot be read one by one, are all read in one pass of its
    stream at the first read and kept in memory."""

    def __init__(self, tree: MemberTree, in_flight: int) -> None:
        self.tree, self.in_flight, self.shown = tree, in_flight, tree.shown
        listing = tree.listing
        self.rels, self.skipped = list(listing.rels), list(listing.skipped)
        self._where = {rel: position for position, rel in enumerate(self.rels)}
        self._streamed = bool(listing.places) and listing.places[0][0] == STREAMED
        self._held: Optional[Dict[str, FileRead]] = None

    def read_many(self, rels: List[str]) -> List[FileRead]:
        if self._streamed:
            if self._held is None:
                self._held = dict(zip(self.rels, self.tree.read_many(list(range(len(self.rels))), self.in_flight)))
            return [self._held[rel] for rel in rels]
        return self.tree.read_many([self._where[rel] for rel in rels], self.in_flight)


__all__ = ["FileRead", "FolderFiles", "MemberFiles", "SampleFiles"]
