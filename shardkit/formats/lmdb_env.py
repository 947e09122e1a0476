"""This process's LMDB environments: one read-only environment per file (py-lmdb allows only one),
shared by reference count among the readers of that file, each with its long-lived read
transaction; a forked child closes the ones it inherited before it opens its own."""
from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Tuple

import lmdb

from ..errors import CorruptShardError, OutOfFilesError, UsageError
from ..integrity import OUT_OF_FILES, fd_path
from ..runtime.forks import FORK_COUNT, watch
from .lmdb_layout import short_message

#: Reader table size; readers open lock-free, so it never limits them (kept generous anyway).
MAX_READERS = 1024


class SharedEnv:
    """One read-only environment of this process with its long-lived read transaction."""

    def __init__(self, env: lmdb.Environment, readahead: bool) -> None:
        self.env = env
        self.txn = env.begin(buffers=True)
        self.readahead = readahead
        self.lock = threading.Lock()
        #: False once closed: the map, and every block address a reader took from it, is gone.
        self.mapped = True

    def close(self) -> None:
        """Close the environment (and its transaction)."""
        with self.lock:
            self.close_inherited()

    def close_inherited(self) -> None:
        """Close an environment inherited over fork: unmaps the child's copy only, and skips the
        lock, which a thread of the parent may have held at the fork."""
        self.mapped = False
        try:
            self.env.close()
        except lmdb.Error:
            pass


class _Environments:
    """This process's environments, one per file (st_dev, st_ino), each with its users. A forked
    child closes the ones it inherited (that unmaps only its own copy) before it opens its own."""

    def __init__(self) -> None:
        # Reentrant: a reader's finalizer (a dataset dropped without close) may release an
        # environment while this thread is inside acquire, opening another (allocations run GC).
        self._lock = threading.RLock()
        self._open: Dict[Tuple[int, int], List[Any]] = {}      # file -> [SharedEnv, users]
        self._forks = watch()

    def acquire(self, key: Tuple[int, int], opener: Any) -> SharedEnv:
        if self._forks != FORK_COUNT[0]:        # a new process: nothing of the parent's is ours
            self._lock = threading.RLock()      # (a thread of the parent may have held the old one)
            for shared, _ in self._open.values():
                shared.close_inherited()
            self._open, self._forks = {}, FORK_COUNT[0]
        with self._lock:
            entry = self._open.get(key)
            if entry is None:
                entry = self._open[key] = [opener(), 0]
            entry[1] += 1
            return entry[0]

    def release(self, key: Tuple[int, int], shared: SharedEnv) -> None:
        """Drop one use of an environment; the last closes it (not one inherited from a parent)."""
        with self._lock:
            entry = self._open.get(key)
            if self._forks != FORK_COUNT[0] or entry is None or entry[0] is not shared:
                return
            entry[1] -= 1
            if entry[1] <= 0:
                del self._open[key]
                shared.close()


ENVIRONMENTS = _Environments()


def acquire(path: str, readahead: bool, fd: Optional[int],
            any_readahead: bool = False) -> Tuple[Tuple[int, int], SharedEnv]:
    """The process's environment for the file at path (opened on first use; py-lmdb allows one
    environment per file and process, so every reader of the file shares it). fd: the caller's
    descriptor of path, which names the file (lmdb itself opens it by path). any_readahead: an
    environment already open with the other readahead will do (peek reads one record)."""
    try:
        stat = os.stat(path) if fd is None else os.fstat(fd)
    except OSError as exc:
        raise CorruptShardError(f"cannot open LMDB shard ({exc.strerror})", path=path) from None
    if stat.st_size == 0:
        raise CorruptShardError("not a readable LMDB shard (empty file)", path=path)
    key = (stat.st_dev, stat.st_ino)

    def opener() -> SharedEnv:
        try:
            env = lmdb.open(fd_path(fd, path), subdir=False, readonly=True, lock=False, meminit=False, create=False,
                            readahead=readahead, max_readers=MAX_READERS, max_dbs=0)
        except lmdb.Error as exc:
            if any(os.strerror(code) in str(exc) for code in OUT_OF_FILES):    # py-lmdb keeps only the text
                raise OutOfFilesError(path) from None
            raise CorruptShardError(f"not a readable LMDB shard ({short_message(exc, path)})", path=path) from None
        return SharedEnv(env, readahead)

    shared = ENVIRONMENTS.acquire(key, opener)
    if shared.readahead != readahead and not any_readahead:
        ENVIRONMENTS.release(key, shared)
        raise UsageError(f"already open in this process with readahead={shared.readahead}; LMDB "
                         "allows one environment per file and process, so close the other dataset first "
                         f"to read it with readahead={readahead}", path=path)
    return key, shared
