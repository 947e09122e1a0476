"""The one per-process registry of open shard files, keyed by file identity.

Every open shard object of a process (a dataset's reader, an LMDB environment) is held here once
per (st_dev, st_ino, kind), reference counted, so that two datasets over the same files share
one handle and each releases only its own reference. Across a fork, a child keeps the readers that
are `inheritable` (a read-only map and nothing else: located HDF5 and .pt shards), so DataLoader
workers forked from a process that opened its shards (`ShardDataset.open_shards`) need not open
them again. Everything else starts anew in the child: inherited objects are closed with
`close_inherited()` when they have one (LMDB refuses a second environment on a file in one
process) and otherwise kept alive untouched (closing a parent's handle can disturb the parent).
"""
from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

#: (st_dev, st_ino): the same file whatever path names it.
FileIdentity = Tuple[int, int]
#: How long a fork waits for other threads to leave the registry and the datasets' LRUs, so the
#: child sees them whole; a part still busy then is forgotten in the child instead of kept.
FORK_WAIT_S = 0.2


def file_identity(path: str) -> FileIdentity:
    """(st_dev, st_ino) of the file at path; OSError when it is missing."""
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def holds_files(obj: Any) -> bool:
    """Whether a registered object keeps a descriptor or a map of its own (its `holds_files`
    attribute, True when it has none)."""
    return bool(getattr(obj, "holds_files", True))


class OpenFiles:
    """Open objects of this process keyed by file identity and kind, each with its users."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._entries: Dict[Hashable, List[Any]] = {}     # key -> [object, users]
        self._inherited: List[Any] = []
        #: How many of _entries keep a descriptor or a map of their own (see holds_files).
        self._holding = 0
        self._inherited_holding = 0      # the same count among _inherited
        #: Changes whenever an object handed out may have been closed or belong to another process
        #: (close_all, fork), so a holder drops what it got before and asks again.
        self.generation = 0
        #: Holders whose forget() close_all calls: what they keep of a closed object (a dataset's
        #: published rows, views of a shard's map) must not keep that map alive.
        self._holders: "weakref.WeakSet[Any]" = weakref.WeakSet()
        #: Per forking thread, set by _before_fork for its fork under way: the holders whose locks it
        #: took, and whether it took the registry's (each then stood still at the fork: the child may
        #: keep what it holds). By thread, since two threads may fork at once.
        self._forks: Dict[int, Tuple[List[Any], bool]] = {}

    def watch(self, holder: Any) -> None:
        """Have close_all() call holder.forget(), a fork take and give back holder.lock, and a forked
        child keep what holder.inheritable_keys() names, then call holder.after_fork(kept) (held
        weakly)."""
        self._holders.add(holder)

    def acquire(self, key: Hashable, opener: Callable[[], Any]) -> Any:
        """The open object for key (opened by opener on first use); the caller owes one release()."""
        with self._lock:
            self._forget_inherited()
            entry = self._entries.get(key)
            if entry is None:
                entry = self._entries[key] = [opener(), 0]
                self._holding += holds_files(entry[0])
            entry[1] += 1
            return entry[0]

    def peek(self, key: Hashable) -> Any:
        """The open object for key in this process, or None (no reference taken)."""
        with self._lock:
            self._forget_inherited()
            entry = self._entries.get(key)
            return None if entry is None else entry[0]

    def release(self, key: Hashable, obj: Any) -> None:
        """Drop one reference to obj; the last one closes it."""
        with self._lock:
            if self._pid != os.getpid():
                return                          # a parent's object: the child leaves it alone
            entry = self._entries.get(key)
            if entry is None or entry[0] is not obj:
                return                          # already closed by close_all()
            entry[1] -= 1
            if entry[1] <= 0:
                del self._entries[key]
                self._holding -= holds_files(obj)
                obj.close()

    def close_all(self) -> None:
        """Close every object this process opened (holders notice through `generation`)."""
        with self._lock:
            self._forget_inherited()
            entries, self._entries = self._entries, {}
            self._holding = 0
            self.generation += 1
            for obj, _ in entries.values():
                obj.close()
            holders = list(self._holders)
        for holder in holders:      # outside the lock: a holder takes its own lock, then this one
            holder.forget()

    def owns(self, key: Hashable, obj: Any) -> bool:
        """Whether obj is this process's open object for key (a forked child's holder asks which of
        the readers it inherited the registry kept)."""
        entry = self._entries.get(key)
        return entry is not None and entry[0] is obj

    def _forget_inherited(self, keep: Optional[Dict[Hashable, int]] = None) -> None:
        """In a new process: set aside every object of the parent but those keyed in keep, which
        stay this process's own with the users keep counts (the holders that still refer to them)."""
        if self._pid == os.getpid():
            return
        keep = keep or {}
        kept: Dict[Hashable, List[Any]] = {}
        for key, entry in self._entries.items():
            obj = entry[0]
            if key in keep:
                kept[key] = [obj, keep[key]]
                continue
            close_inherited = getattr(obj, "close_inherited", None)
            if close_inherited is not None:
                close_inherited()
            else:
                self._inherited.append(obj)
                self._inherited_holding += holds_files(obj)
        self._entries = kept
        self._holding = sum(holds_files(entry[0]) for entry in kept.values())
        self._pid = os.getpid()
        self.generation += 1

    def _before_fork(self) -> None:
        """Wait (FORK_WAIT_S at most) for other threads to leave each holder's lock and the
        registry's, and hold them over the fork, so the child inherits none of them mid-change."""
        deadline = time.monotonic() + FORK_WAIT_S
        quiet = [holder for holder in list(self._holders)
                 if holder.lock.acquire(timeout=max(0.0, deadline - time.monotonic()))]
        self._forks[threading.get_ident()] = quiet, self._lock.acquire(timeout=max(0.0, deadline - time.monotonic()))

    def _after_fork_in_parent(self) -> None:
        quiet, registry = self._forks.pop(threading.get_ident(), ([], False))
        if registry:
            self._lock.release()
        for holder in quiet:
            holder.lock.release()

    def _after_fork_in_child(self) -> None:
        # A lock held by another thread at fork time would stay held in the child forever.
        self._lock = threading.RLock()
        quiet, registry = self._forks.get(threading.get_ident(), ([], False))
        self._forks = {}
        current = self.generation       # what a holder still up to date with the registry has
        quiet = [holder for holder in quiet if holder.generation == current] if registry else []
        keep: Dict[Hashable, int] = {}
        for holder in quiet:
            for key in holder.inheritable_keys():
                keep[key] = keep.get(key, 0) + 1
        self._forget_inherited(keep)
        kept = {id(holder) for holder in quiet}
        for holder in list(self._holders):
            holder.after_fork(id(holder) in kept)

    def held(self) -> int:
        """How many open objects of this process keep a descriptor or a map (each at most one of
        each), those inherited from a parent included: cheap enough to ask before every open. An
        LMDB reader is not one of them: its environment, registered apart, holds its file."""
        return self._holding + self._inherited_holding

    def __len__(self) -> int:
        """How many distinct files this process holds open."""
        with self._lock:
            self._forget_inherited()
            return len({key[:2] if isinstance(key, tuple) else key for key in self._entries})


OPEN_FILES = OpenFiles()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=OPEN_FILES._before_fork, after_in_parent=OPEN_FILES._after_fork_in_parent,
                        after_in_child=OPEN_FILES._after_fork_in_child)
