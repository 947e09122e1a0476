"""Which files of a dataset changed since a process opened them (Linux inotify, no polling).

A shard truncated while it is mapped ends the reading process with SIGBUS at the next touch of a
page past its new end; one replaced by rename is no longer what was checked. A ShardCache asks
`changed()` before each batch: one read of a non-blocking inotify descriptor, which finds nothing
almost always. Names it reports are set aside and opened again, with every check, at their next
read. What remains (docs/reliability.md): a change between that look and a read of the same batch,
changes made on another machine of a network file system, and systems without inotify.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import sys
from typing import Any, Dict, List, Optional, Set

from ..runtime.forks import FORK_COUNT, watch

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x002, 0x004, 0x008
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_DELETE, _IN_CREATE = 0x040, 0x080, 0x200, 0x100
_IN_DELETE_SELF, _IN_MOVE_SELF, _IN_Q_OVERFLOW = 0x400, 0x800, 0x4000
_IN_NONBLOCK, _IN_CLOEXEC = os.O_NONBLOCK, getattr(os, "O_CLOEXEC", 0o2000000)
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
        libc.inotify_init1.argtypes, libc.inotify_add_watch.argtypes = [ctypes.c_int], \
            [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


class FileWatch:
    """Changes to the files directly inside some folders (names relative to `root`), noticed in
    this process; nothing (and never an error) where inotify cannot be had."""

    def __init__(self, root: str, folders: List[str]) -> None:
        self._root, self._folders = root, folders
        self._fd: Optional[int] = None
        self._where: Dict[int, str] = {}
        self._forks = -1

    def _start(self) -> None:
        """A descriptor of this process's own (a child's copy would share its parent's events)."""
        if self._fd is not None:
            os.close(self._fd)      # the parent's, inherited: closing this copy leaves the parent's
        self._forks, self._fd, self._where = watch(), None, {}
        if _LIBC is None:
            return
        fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return          # out of inotify instances: changes go unnoticed, as without inotify
        for folder in self._folders:
            wd = _LIBC.inotify_add_watch(fd, os.fsencode(os.path.join(self._root, folder)), _MASK)
            if wd >= 0:
                self._where[wd] = folder
        self._fd = fd

    def start(self) -> None:
        """Watch from now on in this process (before its first file opens); idempotent."""
        if self._forks != FORK_COUNT[0]:
            self._start()

    def changed(self) -> Set[str]:
        """Names (e.g. "shards/shard-00003.h5") of files created, written, truncated, renamed or
        deleted since the last call; EVERYTHING when it cannot say which."""
        self.start()
        if self._fd is None:
            return set()
        try:
            data = os.read(self._fd, 65536)
        except BlockingIOError:
            return set()
        except OSError:
            return {EVERYTHING}
        found: Set[str] = set()
        position = 0
        while position + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, position)
            raw = data[position + _EVENT.size:position + _EVENT.size + length].rstrip(b"\0")
            position += _EVENT.size + length
            if mask & (_IN_Q_OVERFLOW | _IN_DELETE_SELF | _IN_MOVE_SELF):
                found.add(EVERYTHING)
            elif wd in self._where:
                folder = self._where[wd]
                name = os.fsdecode(raw)
                found.add(f"{folder}/{name}" if folder else name)
        return found

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._forks = None, -1

    def __getstate__(self) -> Dict[str, Any]:
        return {"_root": self._root, "_folders": self._folders, "_fd": None, "_where": {}, "_forks": -1}
