"""The files below a SRC folder: the walk, and reading a walked file.

SRC's location is trusted, its content is not: a symbolic link inside it may point anywhere. The
walk follows a link (to a file or a folder) only when its target's real path lies inside SRC's
real path, and lists every other one for the source to report, never reading or walking what it
points at. A file is read only if it is still the file the scan found there (same device and
inode) and the real path of what was opened still lies inside SRC: a link swapped in after the
scan cannot lead a read out of SRC.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from stat import S_ISBLK, S_ISCHR, S_ISDIR, S_ISFIFO, S_ISREG, S_ISSOCK
from typing import Dict, FrozenSet, Iterable, Iterator, List, Optional, Set, Tuple

from ..errors import SampleError

#: Extensions counted one by one in a summary of ignored files; the rest are summed as OTHER_EXTENSIONS.
MAX_EXTENSIONS = 20
OTHER_EXTENSIONS = "(other)"
NO_EXTENSION = "(none)"


@dataclass(frozen=True)
class LinkOut:
    """A symbolic link below SRC whose target lies outside SRC (not followed)."""

    path: str           # relative to SRC
    target: str         # the link's text, as readlink gives it
    folder: bool        # whether it points at a folder

    def reason(self) -> str:
        """Why it is skipped, in words (one skipped.jsonl reason)."""
        what = "a folder" if self.folder else "a file"
        return (f"symbolic link to {what} outside SRC ({self.target!r}); not followed (copy what it points "
                "at into SRC to convert it)")


def walk_files(root: str, links_out: Optional[List[LinkOut]] = None) -> Iterator[str]:
    """Relative POSIX paths of every non-directory entry below root, following links that stay
    inside root once (loops are cut, the first link in this order wins) and leaving out those that
    lead outside it (appended to links_out when given), sorted component by component (as
    sorted(key=lambda rel: rel.split("/")) would): each folder's listing is sorted by name and
    walked depth first, so no sort of the whole tree is needed. One scandir per folder and one
    string concatenation per file (a realpath per link): the scan of a large tree is part of every
    conversion's serial time."""
    seen: Set[Tuple[int, int]] = set()
    inside = _Inside(root)

    def listing(folder: str) -> List[os.DirEntry]:
        try:
            stat = os.stat(folder)
            key = (stat.st_dev, stat.st_ino)
            if key in seen:
                return []
            seen.add(key)
            with os.scandir(folder) as entries:
                return sorted(entries, key=_entry_name)
        except OSError:
            return []

    stack = [("", iter(listing(root)))]     # (relative prefix "" or "a/b/", the rest of its listing)
    while stack:
        prefix, entries = stack[-1]
        for entry in entries:
            try:
                is_dir = entry.is_dir()         # follows links that stay inside root, as os.walk(followlinks=True)
            except OSError:
                is_dir = False
            if entry.is_symlink() and not inside.holds_target(entry.path):
                if links_out is not None:
                    links_out.append(LinkOut(prefix + entry.name, _link_text(entry.path), is_dir))
                continue
            if is_dir:
                stack.append((prefix + entry.name + "/", iter(listing(entry.path))))
                break
            yield prefix + entry.name
        else:
            stack.pop()


class _Inside:
    """Whether a link's target lies inside a root (real paths compared)."""

    def __init__(self, root: str) -> None:
        self.real_root = os.path.realpath(root)
        self.prefix = os.path.join(self.real_root, "")

    def holds_target(self, path: str) -> bool:
        """True when the link at path leads inside the root, or nowhere (a broken link or a loop:
        there is nothing to read, and the scan reports it as such)."""
        real = os.path.realpath(path)
        if real != self.real_root and not real.startswith(self.prefix):
            return not os.path.exists(real)
        return True


def _link_text(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _entry_name(entry: "os.DirEntry[str]") -> str:
    return entry.name


def has_extension(rel: str, extensions: FrozenSet[str]) -> bool:
    """Whether the file name's extension (lower case, with dot; os.path.splitext's rule: leading
    dots do not start one) is in extensions, without splitext's per-call overhead."""
    dot = rel.rfind(".")
    if dot < 0 or rel[dot:].lower() not in extensions:     # (an extension holds no "/")
        return False
    return rel[rel.rfind("/") + 1:dot].strip(".") != ""


def extension(rel: str) -> str:
    """A file name's extension in lower case with its dot (os.path.splitext's rule), or NO_EXTENSION."""
    suffix = os.path.splitext(rel)[1].lower()
    return suffix if suffix else NO_EXTENSION


def extension_counts(rels: Iterable[str]) -> Dict[str, int]:
    """How many of the files have each extension: the MAX_EXTENSIONS commonest (ties by name),
    the rest summed as OTHER_EXTENSIONS, so that a tree of odd names cannot bloat the manifest."""
    counts: Dict[str, int] = {}
    for rel in rels:
        key = extension(rel)
        counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    kept = dict(ranked[:MAX_EXTENSIONS])
    rest = sum(count for _, count in ranked[MAX_EXTENSIONS:])
    if rest:
        kept[OTHER_EXTENSIONS] = rest
    return kept


#: A source file is opened without blocking (a FIFO) and is not inherited by child processes.
_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
#: Looking at a file without opening it for reading (Linux): a FIFO or device is never opened.
_O_PATH = getattr(os, "O_PATH", 0)
_NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)


class Pinned:
    """A name for the file at path that keeps naming the file checked here, whatever happens to
    path afterwards (a context manager: the name is valid until it exits).

    The path is resolved once, to a descriptor that cannot read (O_PATH, so a FIFO or device is
    never opened); the kernel's name for that descriptor (/proc/self/fd) gives its real path,
    which must lie inside real_root (SRC's real path; None: anywhere), and fstat shows it is a
    regular file, the one the scan found (identity: its (st_dev, st_ino) then). Opening `name`
    reopens that descriptor, never the path: a link swapped in after the check leads nowhere.
    Where O_PATH or /proc is missing the path itself is checked and named (a weaker promise).
    SampleError when a check fails; OSError when path cannot be resolved."""

    def __init__(self, path: str, real_root: Optional[str], identity: Optional[Tuple[int, int]] = None) -> None:
        self.name, self._look = path, -1
        if _O_PATH:
            self._look = os.open(path, _O_PATH | getattr(os, "O_CLOEXEC", 0))
            try:
                self.name = f"/proc/self/fd/{self._look}"
                real = os.readlink(self.name)
            except OSError:                                 # no /proc: the path is what is checked
                self.close()
                self.name = path
        try:
            if self._look < 0:
                real = os.path.realpath(path)
            self.stat = os.fstat(self._look) if self._look >= 0 else os.stat(path)
            _check(real_root, real, self.stat, identity)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Let go of the descriptor (what was opened by its name stays open)."""
        if self._look >= 0:
            os.close(self._look)
            self._look = -1

    def __enter__(self) -> str:
        return self.name

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_inside(real_root: str, path: str, identity: Optional[Tuple[int, int]] = None, link: bool = False) -> bytes:
    """All bytes of the regular file at path, read only if its real path lies inside real_root and
    it is the file the scan found (identity: its (st_dev, st_ino) then); SampleError otherwise (a
    FIFO named .jpg would block the conversion forever, a device would never end, a link out of
    SRC leads to another's file). A name that was no link at the scan (link=False) is opened
    without following one (O_NOFOLLOW); one that was a link into SRC is resolved through Pinned,
    so a FIFO or device it may lead to now is never opened. Either way the kernel's name for the
    open descriptor is what is checked, before any byte is read."""
    if link:
        with Pinned(path, real_root, identity) as name:
            fd = os.open(name, _READ_FLAGS)
    else:
        try:
            fd = os.open(path, _READ_FLAGS | _NO_FOLLOW)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SampleError("became a symbolic link after the scan; not followed") from None
            raise
    try:
        stat = os.fstat(fd)
        _check(real_root, _real_path(fd, path), stat, identity)
    except BaseException:
        os.close(fd)
        raise
    return _read_all(fd, stat.st_size)


def _real_path(fd: int, path: str) -> str:
    """The real path of an open file: the kernel's name for its descriptor (realpath of the name
    where /proc is missing)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _check(real_root: Optional[str], real: str, stat: os.stat_result, identity: Optional[Tuple[int, int]]) -> None:
    if real_root is not None and real != real_root and not real.startswith(os.path.join(real_root, "")):
        raise SampleError(f"leads outside SRC (to {real!r}); not read")
    if identity is not None and (stat.st_dev, stat.st_ino) != identity:
        raise SampleError("is no longer the file the scan found (replaced, or a link in its path changed)")
    if not S_ISREG(stat.st_mode):
        raise SampleError(f"not a regular file ({file_kind(stat.st_mode)})")


def _read_all(fd: int, size: int) -> bytes:
    """Every byte of an open regular file, in one read call for the size fstat saw (asking one
    byte more proves the end); the descriptor is closed."""
    try:
        wanted = min(size + 1, 1 << 24)
        chunks = [os.read(fd, wanted)]
        if len(chunks[0]) == wanted:        # more follows: over 16 MiB, or the file grew
            while chunks[-1]:
                chunks.append(os.read(fd, 1 << 24))
        return b"".join(chunks)
    finally:
        os.close(fd)


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words."""
    for test, word in ((S_ISDIR, "a directory"), (S_ISFIFO, "a FIFO"), (S_ISSOCK, "a socket"),
                       (S_ISCHR, "a character device"), (S_ISBLK, "a block device")):
        if test(mode):
            return word
    return "a special file"


__all__ = ["LinkOut", "Pinned", "extension", "extension_counts", "file_kind", "has_extension", "read_inside",
           "walk_files"]
