"""Per-process shard handles: a bounded LRU of open readers, shared by every dataset of a process.

Handles never cross a fork: when the process id changes (a DataLoader worker, a fork, spawn)
the cache starts empty, so each worker opens its own. LMDB forbids two handles on one
environment in a process, which sharing them process-wide also satisfies.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, Callable, List

from .formats.base import ShardReader


class HandleCache:
    """LRU of open ShardReaders keyed by shard path, valid for one process id."""

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._readers: "OrderedDict[str, ShardReader]" = OrderedDict()
        self._inherited: List[Any] = []
        self._lock = threading.RLock()
        #: Changes whenever a reader handed out may have been closed or belong to another process,
        #: so a caller may keep using the reader it got while the generation is unchanged.
        self.generation = 0

    def get(self, key: str, opener: Callable[[], ShardReader], capacity: int) -> ShardReader:
        """The open reader for key, opening it (and closing the least recently used) if needed."""
        with self._lock:
            if self._pid != os.getpid():
                self.reset()
            reader = self._readers.get(key)
            if reader is not None:
                self._readers.move_to_end(key)
                return reader
            reader = opener()
            self._readers[key] = reader
            while len(self._readers) > max(1, capacity):
                _, oldest = self._readers.popitem(last=False)
                self.generation += 1
                oldest.close()
            return reader

    def reset(self) -> None:
        """Forget handles inherited from a parent process without touching them."""
        with self._lock:
            if self._pid != os.getpid():
                # Closing a parent's handle in a child can disturb the parent (LMDB, HDF5):
                # keep the objects alive and unused instead.
                self._inherited.append(self._readers)
            else:
                for reader in self._readers.values():
                    reader.close()
            self._readers = OrderedDict()
            self._pid = os.getpid()
            self.generation += 1

    def _after_fork_in_child(self) -> None:
        # A lock held by another thread at fork time would stay held in the child forever.
        self._lock = threading.RLock()
        self.generation += 1

    def close_all(self) -> None:
        """Close every handle this process opened."""
        self.reset()

    def __len__(self) -> int:
        return len(self._readers) if self._pid == os.getpid() else 0


HANDLES = HandleCache()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=HANDLES._after_fork_in_child)


def worker_init_fn(worker_id: int) -> None:
    """DataLoader worker_init_fn: drop any handle the worker inherited; it opens its own lazily."""
    if HANDLES._pid != os.getpid():
        HANDLES.reset()
