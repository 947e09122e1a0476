"""Which files of a dataset changed since a process opened them (Linux inotify, no polling).

A shard truncated while it is mapped ends the reading process with SIGBUS at the next touch of a
page past its new end; one replaced by rename is no longer what was checked. A ShardCache asks its
FileWatch `changed()` before each batch: one read of a non-blocking inotify descriptor, which finds
nothing almost always. Names it reports are set aside and opened again, with every check, at their
next read. One inotify instance serves every dataset of a process (the system allows a user only
about 128); each FileWatch sees the events of its own folders. What remains (docs/reliability.md):
a change between that look and a read of the same batch, changes made on another machine of a
network file system, and systems without inotify.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
import threading
import weakref
from typing import Any, Dict, List, Optional, Set, Tuple

from ..runtime.forks import FORK_COUNT, watch

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x002, 0x004, 0x008
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x040, 0x080, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW, _IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_DELETE | _IN_CREATE
         | _IN_DELETE_SELF | _IN_MOVE_SELF)
_EVENT = struct.Struct("iIII")
#: Every file of the dataset: a lost event queue, or a watched folder itself moved or deleted.
EVERYTHING = "*"


def _libc() -> Optional[Any]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class _Watcher:
    """This process's one inotify instance: the folders watched for FileWatch objects, and the
    events read so far, handed to each watch of the folder they happened in."""

    def __init__(self) -> None:
        self.forks = watch()
        self.lock = threading.RLock()
        self.fd: Optional[int] = None
        if _LIBC is not None:
            fd = _LIBC.inotify_init1(os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
            self.fd = fd if fd >= 0 else None       # no instance left: changes go unnoticed
        self.folders: Dict[int, Tuple[str, "weakref.WeakSet[FileWatch]"]] = {}      # wd -> (path, watches)
        #: Watch descriptors of FileWatch objects freed since (a finalizer only queues them here:
        #: it may run anywhere, even inside poll).
        self.orphans: List[int] = []

    def add(self, watcher: "FileWatch", path: str) -> Optional[int]:
        """Watch path's files for watcher; its watch descriptor, or None where it cannot be watched."""
        self.tidy()
        if self.fd is None or _LIBC is None:
            return None
        wd = _LIBC.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            return None
        self.folders.setdefault(wd, (path, weakref.WeakSet()))[1].add(watcher)
        return wd

    def tidy(self) -> None:
        """Stop watching the folders no FileWatch wants any more."""
        while self.orphans:
            wd = self.orphans.pop()
            entry = self.folders.get(wd)
            if entry is not None and not len(entry[1]) and self.fd is not None and _LIBC is not None:
                del self.folders[wd]
                _LIBC.inotify_rm_watch(self.fd, wd)

    def poll(self) -> None:
        """Read every pending event and hand it to the watches of its folder."""
        self.tidy()
        if self.fd is None:
            return
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
            for _, watchers in self.folders.values():
                for one in watchers:
                    one.pending.add(EVERYTHING)
        position = 0
        while position + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, position)
            name = os.fsdecode(data[position + _EVENT.size:position + _EVENT.size + length].rstrip(b"\0"))
            position += _EVENT.size + length
            targets = [one for _, watchers in self.folders.values() for one in watchers] \
                if mask & _IN_Q_OVERFLOW else list(self.folders.get(wd, ("", ()))[1])
            for one in targets:
                one.note(wd, name, bool(mask & (_IN_Q_OVERFLOW | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_IGNORED)))


_WATCHERS: List[_Watcher] = []


def _watcher() -> _Watcher:
    """The process's watcher (a forked child makes its own; the parent's instance is left to it)."""
    if not _WATCHERS or _WATCHERS[0].forks != FORK_COUNT[0]:
        _WATCHERS[:] = [_Watcher()]
    return _WATCHERS[0]


class FileWatch:
    """Changes to the files directly inside some folders of a dataset (names relative to `root`),
    noticed in this process; nothing (and never an error) where inotify cannot be had."""

    def __init__(self, root: str, folders: List[str]) -> None:
        self._root, self._folders = root, folders
        self._wds: Dict[int, str] = {}
        self._forks = -1
        self.pending: Set[str] = set()

    def start(self) -> None:
        """Watch from now on in this process (before its first file opens); idempotent."""
        if self._forks == FORK_COUNT[0]:
            return
        watcher = _watcher()
        with watcher.lock:
            self._wds, self.pending, self._forks = {}, set(), FORK_COUNT[0]
            for folder in self._folders:
                wd = watcher.add(self, os.path.join(self._root, folder))
                if wd is not None:
                    self._wds[wd] = folder
        weakref.finalize(self, watcher.orphans.extend, list(self._wds))

    def note(self, wd: int, name: str, everything: bool) -> None:
        """An event the watcher read: a file of one of our folders changed (or all may have)."""
        folder = self._wds.get(wd)
        if everything:
            self.pending.add(EVERYTHING)
        elif folder is not None:
            self.pending.add(f"{folder}/{name}" if folder else name)

    def changed(self) -> Set[str]:
        """Names (e.g. "shards/shard-00003.h5") of files created, written, truncated, renamed or
        deleted since the last call; EVERYTHING when it cannot say which."""
        self.start()
        watcher = _watcher()
        with watcher.lock:
            watcher.poll()
            found, self.pending = self.pending, set()
        return found

    def close(self) -> None:
        """Stop watching (this object's folders, once no other dataset watches them)."""
        if self._forks == FORK_COUNT[0]:
            watcher = _watcher()
            with watcher.lock:
                for wd in self._wds:
                    watcher.folders.get(wd, ("", weakref.WeakSet()))[1].discard(self)
                watcher.orphans.extend(self._wds)
                watcher.tidy()
        self._wds, self._forks, self.pending = {}, -1, set()

    def __getstate__(self) -> Dict[str, Any]:
        return {"_root": self._root, "_folders": self._folders, "_wds": {}, "_forks": -1, "pending": set()}
