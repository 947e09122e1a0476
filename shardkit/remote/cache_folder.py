"""The shard cache on disk, shared by every process of a machine that uses the same folder.

    CACHE_DIR/objects/<sha256>-<size><ext>        a complete, verified shard (renamed in only after its check)
    CACHE_DIR/objects/.<object>.tmp-<hex>         a download under way (or left by a killed process)
    CACHE_DIR/fetch/<object>                      flock held exclusively while <object> is downloaded
    CACHE_DIR/pins/<object>                       flock held shared by each process reading <object>
    CACHE_DIR/cache.lock                          flock held while space is counted and made

Objects are named by content, so two datasets (or two URLs of one) share a shard. A lock held by
a process that dies is released by the kernel, so nobody waits forever on a dead download, and a
temporary file is never taken for an object: only a checked file is renamed to an object's name.
Least recently used objects (by mtime, touched on each use) are evicted to stay under the limit,
never one that a process has pinned."""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Collection, Iterator, List, Optional, Tuple

from ..integrity import create_new

#: <sha256>-<size><ext> and the temporary names of downloads of it.
_OBJECT = re.compile(r"([0-9a-f]{64})-(\d+)(\.[A-Za-z0-9]{1,12})?\Z")
_TEMP = re.compile(r"\.(.+)\.tmp-[0-9a-f]{16}\Z")
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,12}\Z")
_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def object_name(sha256: str, size: int, shard_path: str) -> str:
    """The cache's name of a shard: its content's sha256 and size, and its file's extension."""
    suffix = os.path.splitext(shard_path)[1]
    return f"{sha256}-{size}" + (suffix if _SUFFIX.match(suffix) else "")


class CacheFolder:
    """The folders and locks of one cache directory (made on first use)."""

    def __init__(self, root: str) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        for folder in (self.objects, self.root / "fetch", self.root / "pins"):
            folder.mkdir(parents=True, exist_ok=True)

    def object_path(self, name: str) -> Path:
        return self.objects / name

    def complete(self, name: str, size: int) -> bool:
        """Whether the object is here, as a regular file of its size (only checked files get the name)."""
        try:
            info = os.lstat(self.objects / name)
        except FileNotFoundError:
            return False
        return stat.S_ISREG(info.st_mode) and info.st_size == size

    def touch(self, name: str) -> None:
        """Mark the object as just used (the LRU order is the objects' mtimes)."""
        with contextlib.suppress(FileNotFoundError):
            os.utime(self.objects / name)

    def pin(self, name: str) -> int:
        """A descriptor holding a shared lock on the object's pin: it is not evicted while any
        process holds one. Close it to unpin."""
        fd = os.open(self.root / "pins" / name, _FLAGS, 0o644)
        fcntl.flock(fd, fcntl.LOCK_SH)
        return fd

    @contextlib.contextmanager
    def fetching(self, name: str) -> Iterator[None]:
        """Held while the object is downloaded: one download per object on the machine; waits for
        another process's download (released by the kernel if that process dies)."""
        fd = os.open(self.root / "fetch" / name, _FLAGS, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._remove_temporaries(name)
            yield
        finally:
            os.close(fd)

    def reserve(self, name: str, size: int, limit: int, evict: bool,
                keep: Collection[str] = ()) -> Tuple[Optional[Path], bool]:
        """Room for a download of size bytes, made by evicting least recently used objects that no
        process pins (nor those in keep), and the temporary file to download into, created while the
        room is counted so that no other process counts the same room; with whether the download
        takes the folder past the limit. evict=False (a prefetch): no file when the room cannot be
        made. evict=True (a read): the file even when every object is pinned, since what is being
        read must be fetched (the cache then holds the limit plus the objects being read, until
        trim() once they are released). Call under fetching(name)."""
        with self._cache_lock():
            used = self._evict_down_to(limit - size, keep)
            past = used + size > limit
            if past and not evict:
                return None, past
            tmp = self.objects / f".{name}.tmp-{secrets.token_hex(8)}"
            os.close(create_new(tmp))
            return tmp, past

    def trim(self, limit: int, keep: Collection[str] = ()) -> bool:
        """Evict least recently used objects that no process pins (nor those in keep) until the
        folder holds at most limit bytes or nothing more can go; whether it is within the limit."""
        with self._cache_lock():
            return self._evict_down_to(limit, keep) <= limit

    def _evict_down_to(self, room: int, keep: Collection[str]) -> int:
        """Evict unpinned objects not in keep, oldest first, until at most room bytes are used; the
        bytes used then. Call under _cache_lock."""
        used, objects = self._usage()
        for victim, victim_size in objects:
            if used <= room:
                break
            if victim not in keep and self._evict(victim):
                used -= victim_size
        return used

    def usage(self) -> int:
        """Bytes the objects and the downloads under way take (downloads at their full size)."""
        return self._usage()[0]

    def _usage(self) -> Tuple[int, List[Tuple[str, int]]]:
        """(bytes counted, complete objects oldest first with their sizes). A temporary file left by
        a dead process is removed here rather than counted."""
        used, objects = 0, []
        for entry in os.scandir(self.objects):
            temp = _TEMP.match(entry.name)
            match = _OBJECT.match(temp.group(1) if temp else entry.name)
            if match is None:
                continue
            size = int(match.group(2))
            if temp is not None:
                if self._abandoned(temp.group(1)):
                    discard(Path(entry.path))
                    continue
            else:
                objects.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name, size))
            used += size
        objects.sort()
        return used, [(name, size) for _, name, size in objects]

    def _abandoned(self, name: str) -> bool:
        """Whether no process downloads the object now (its fetch lock is free)."""
        fd = os.open(self.root / "fetch" / name, _FLAGS, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            return False
        finally:
            os.close(fd)

    def _evict(self, name: str) -> bool:
        """Remove the object unless a process pins it; whether it was removed."""
        fd = os.open(self.root / "pins" / name, _FLAGS, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        try:
            discard(self.objects / name)
            return True
        finally:
            os.close(fd)

    def _remove_temporaries(self, name: str) -> None:
        """Temporary files of the object left by a process that died (the caller holds its fetch lock)."""
        for entry in os.scandir(self.objects):
            temp = _TEMP.match(entry.name)
            if temp is not None and temp.group(1) == name:
                discard(Path(entry.path))

    @contextlib.contextmanager
    def _cache_lock(self) -> Iterator[None]:
        fd = os.open(self.root / "cache.lock", _FLAGS, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def discard(path: Path) -> None:
    """Remove a file if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
