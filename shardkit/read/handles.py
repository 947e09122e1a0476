"""A dataset's ready shards: a bounded LRU of readers taken from the process's one registry.

Readers live in `openfiles.OPEN_FILES`, keyed by file identity and the reader's options, so two
datasets over the same files share one reader; each dataset keeps its own LRU of at most
`max_open_shards` of them, and evicting from it releases only its own reference. In a forked
child an LRU keeps the inheritable readers (a read-only map and nothing else) and forgets the rest.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, Hashable, List, Optional, Tuple

import numpy as np

from ..formats.base import Rows, ShardReader
from ..formats.locating import FileRows
from .openfiles import OPEN_FILES
from .row_arena import RowArena

#: Kept free of shard descriptors and maps for the rest of the process (sockets, pipes, libraries).
DESCRIPTOR_RESERVE = 256
MAP_RESERVE = 1024
#: Raising the soft descriptor limit goes no further than this (docs/formats.md).
DESCRIPTOR_TARGET = 1 << 16
#: The default budget never exceeds this many shards per dataset and process.
MAX_DEFAULT_OPEN_SHARDS = 16384

#: Backwards-compatible name: the process registry (close_all() closes every open shard).
HANDLES = OPEN_FILES


def _max_map_count() -> int:
    try:
        with open("/proc/sys/vm/max_map_count") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return 65530


def default_max_open_shards() -> int:
    """How many shards a dataset keeps ready in a process when not told: each holds at most one
    descriptor and one map, so the budget follows RLIMIT_NOFILE (its soft limit raised toward the
    hard one, at most to DESCRIPTOR_TARGET) and vm.max_map_count, leaving reserves for the rest."""
    descriptors = DESCRIPTOR_TARGET
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = DESCRIPTOR_TARGET if hard == resource.RLIM_INFINITY else min(hard, DESCRIPTOR_TARGET)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
                soft = wanted
            except (ValueError, OSError):
                pass
        if soft != resource.RLIM_INFINITY:
            descriptors = soft
    except ImportError:     # not a POSIX system
        pass
    maps = _max_map_count()
    budget = min(descriptors - DESCRIPTOR_RESERVE, (maps - MAP_RESERVE) // 2, MAX_DEFAULT_OPEN_SHARDS)
    return max(16, budget)


_process_budget: Dict[int, int] = {}


def process_budget() -> int:
    """default_max_open_shards() of this process, computed once: the most shard files all of its
    datasets together keep open."""
    pid = os.getpid()
    budget = _process_budget.get(pid)
    if budget is None:
        budget = _process_budget[pid] = default_max_open_shards()
    return budget


def arena_map_limit() -> int:
    """The maps the row arenas of this process may hold together: vm.max_map_count less the
    reserve and two maps for each shard the process budget lets it keep open."""
    return _max_map_count() - MAP_RESERVE - 2 * process_budget()


class ShardHandles:
    """One dataset's ready readers in this process, least recently used first, at most `capacity`.

    `slots[shard]` is the same reader (or None) by position: a random read over thousands of
    shards looks it up in one list instead of a hash table's scattered entries. `rows[shard]` is
    a ready shard's rows() once its dataset checked and published it (publish_rows), else None.
    With `max_rows` (the most rows a shard of the dataset holds; 0: the dataset reads no rows),
    when every shard of the dataset fits the LRU, shards whose rows lie in their file as one run
    (the reader's file_rows) are also placed in one `arena` (read/row_arena.py), whose one array every published
    shard's rows are then read from. A placed shard stays mapped there until the LRU forgets its
    readers (close, close_all, a fork that does not keep them) and no row view of it is left.
    """

    def __init__(self, capacity: int, shards: int, max_rows: int = 0) -> None:
        self.capacity = capacity
        self.max_rows = max_rows
        self.ready: "OrderedDict[int, ShardReader]" = OrderedDict()
        self.slots: List[Optional[ShardReader]] = [None] * shards
        self.rows: List[Optional[Rows]] = [None] * shards
        #: The rows of the published shards in one array (None before the first shard placed, or
        #: where an arena cannot be used: _arena_tried).
        self.arena: Optional[RowArena] = None
        self._arena_tried = False
        #: Whether forks no longer place this dataset's shards (ShardRecords.place_before_fork): the
        #: first did, or the dataset was closed (a fork does not reopen what its owner closed).
        self.swept = False
        self._keys: Dict[int, Hashable] = {}
        self.generation = OPEN_FILES.generation
        #: This LRU's lock: its changes (and the registry calls between them) are one step for the
        #: threads of a process, and a reader read under it is not released (closed) meanwhile.
        self.lock = threading.RLock()
        OPEN_FILES.watch(self)          # close_all() drops the rows this holds

    def get(self, shard: int, options_key: Hashable, open_fd: Callable[[], int],
            open_reader: Callable[[int], ShardReader]) -> ShardReader:
        """The ready reader of a shard: from this LRU, else the process's reader of that file (shared
        with other datasets), else a new one. open_fd() gives the checked descriptor that names the
        file (its identity keys the registry); open_reader(fd) opens a reader through it. The least
        recently used reader beyond capacity is released."""
        with self.lock:
            return self._get(shard, options_key, open_fd, open_reader)

    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickled (to a spawned DataLoader worker) as a new, empty LRU: readers and their lock
        never cross processes."""
        return ShardHandles, (self.capacity, len(self.slots), self.max_rows)

    def inheritable_keys(self) -> List[Hashable]:
        """Registry keys of this LRU's ready readers that a forked child may keep (their
        `inheritable`), one per shard (each holds one reference), asked while the fork holds the lock."""
        return [self._keys[shard] for shard, reader in self.ready.items()
                if reader.inheritable and self.slots[shard] is reader and OPEN_FILES.owns(self._keys[shard], reader)]

    def after_fork(self, kept: bool) -> None:
        """In a forked child: a new lock (one that a thread of the parent held at the fork would stay
        held), and of the readers inherited, those the registry kept for this LRU (kept: it stood
        still at the fork and was up to date); the rest are the parent's, forgotten, not released,
        though their published rows in the arena stay readable (reads of them open no file)."""
        self.lock = threading.RLock()
        if not kept:
            self.forget()
            return
        for shard in [shard for shard, reader in self.ready.items() if not OPEN_FILES.owns(self._keys[shard], reader)]:
            del self.ready[shard]
            del self._keys[shard]
            # Its slice of the arena stays published: the child's own copy of a mapping made from
            # the checked descriptor, which needs no reader (an LMDB environment cannot cross).
            self.slots[shard] = self.rows[shard] = None
        self.generation = OPEN_FILES.generation

    def _get(self, shard: int, options_key: Hashable, open_fd: Callable[[], int],
             open_reader: Callable[[int], ShardReader]) -> ShardReader:
        if self.generation != OPEN_FILES.generation:
            self.forget()
        reader = self.ready.get(shard)
        if reader is not None:
            self.ready.move_to_end(shard)
            return reader
        self._make_room()
        fd = open_fd()
        try:
            info = os.fstat(fd)
            key: Tuple[Any, ...] = (info.st_dev, info.st_ino, options_key)
            reader = OPEN_FILES.acquire(key, lambda: open_reader(fd))
            if self.max_rows:
                self._place(shard, fd, reader)
        finally:
            os.close(fd)
        if self.generation != OPEN_FILES.generation:     # acquire() noticed a fork
            self.forget()
        self.ready[shard] = reader
        self._keys[shard] = key
        self.slots[shard] = reader
        while len(self.ready) > self.capacity:
            self._release_oldest()
        return reader

    def _place(self, shard: int, fd: int, reader: ShardReader) -> None:
        """Map a new reader's rows into the arena (through fd, the descriptor it was opened
        through), when they lie in its file as one run (file_rows); reads use them once published."""
        if self._may_use_arena():           # else no reader is asked where its rows lie (LMDB reads to answer)
            where = reader.file_rows(fd)
            if where is not None:
                self._map_rows(shard, fd, where)

    def may_place_run(self, shard: int) -> bool:
        """Whether place_run can take a shard with no reader here: asked before its file is opened,
        so a dataset whose shards cannot go to an arena opens each file once, through its reader.
        The caller holds the lock."""
        if self.generation != OPEN_FILES.generation:
            self.forget()
        return self.slots[shard] is None and self.may_place()

    def may_place(self) -> bool:
        """Whether this LRU may still place shards in an arena (not when one failed or cannot be
        made, or the dataset's shards do not all fit the LRU)."""
        return self._may_use_arena() and (self.arena is None or self.arena.usable)

    def place_run(self, shard: int, fd: int, where: FileRows) -> Optional[np.ndarray]:
        """Map the rows of a shard that may_place_run allowed into the arena from its file (open as
        fd, checked), where a small record of its format says they lie (ShardRecords._place_run):
        the rows as mapped, for the caller to check and then publish_placed (or withdraw); None
        where they cannot be placed. The caller holds the lock."""
        if not self._map_rows(shard, fd, where):
            return None
        assert self.arena is not None
        return self.arena.placed_rows(shard, where.row_count)

    def publish_placed(self, shard: int) -> None:
        """Let reads use the rows place_run mapped (checked since)."""
        if self.arena is not None:
            self.arena.publish(shard)

    def _may_use_arena(self) -> bool:
        """Whether this LRU places rows in an arena: only while every shard of the dataset fits it
        (shards coming and going would keep the evicted ones' maps)."""
        if self.arena is None and (self._arena_tried or len(self.slots) > min(self.capacity, process_budget())):
            self._arena_tried = True
            return False
        return True

    def _map_rows(self, shard: int, fd: int, where: FileRows) -> bool:
        """Map a shard's rows into the arena (made for the first shard placed); False where they
        cannot be."""
        arena = self.arena
        if arena is None:
            self._arena_tried = True
            arena = self.arena = RowArena.create(len(self.slots), self.max_rows, where, arena_map_limit())
            if arena is None:
                return False
        return arena.place(shard, fd, where)

    def withdraw(self, shard: int) -> None:
        """A shard's reader left this LRU, or its placed rows failed their check: reads of it no
        longer use its rows."""
        self.slots[shard] = self.rows[shard] = None
        if self.arena is not None:
            self.arena.withdraw(shard)

    def _make_room(self) -> None:
        """Release this dataset's least recently used readers while the process already holds as
        many shard files as its limits allow: each dataset's budget is its own, but several
        datasets (and what a forked worker inherited) share the process's descriptors and maps."""
        limit = process_budget()
        while self.ready and OPEN_FILES.held() >= limit:
            self._release_oldest()

    def publish_rows(self, shard: int, reader: ShardReader) -> None:
        """Keep a ready, checked shard's rows() by position, for reads that need nothing else of it.
        The array keeps the shard's map alive until it is dropped here, when its reader leaves."""
        with self.lock:
            if self.slots[shard] is reader:
                self.rows[shard] = reader.rows()
                if self.arena is not None:
                    self.arena.publish(shard)

    def release_placed(self, shard: int) -> None:
        """Release a shard's reader but keep its rows published in the arena, as a fork keeps them
        for a child (after_fork): reads of the rows need no reader, and the process no descriptor."""
        with self.lock:
            reader = self.ready.pop(shard, None)
            self.slots[shard] = self.rows[shard] = None
            if reader is not None:
                OPEN_FILES.release(self._keys.pop(shard), reader)

    def _release_oldest(self) -> None:
        """Release this dataset's least recently used reader."""
        oldest, evicted = self.ready.popitem(last=False)
        self.withdraw(oldest)
        OPEN_FILES.release(self._keys.pop(oldest), evicted)

    def discard(self, shard: int) -> None:
        """Release one shard's reader (one that failed a check must not stay ready)."""
        with self.lock:
            reader = self.ready.pop(shard, None)
            self.withdraw(shard)
            if reader is not None:
                OPEN_FILES.release(self._keys.pop(shard), reader)

    def forget(self) -> None:
        """Drop every reader without releasing it: the registry closed them or they are a parent's."""
        with self.lock:
            self.ready = OrderedDict()
            self.slots = [None] * len(self.slots)
            self.rows = [None] * len(self.slots)
            self.arena, self._arena_tried = None, False     # unmapped once no row view holds it
            self._keys = {}
            self.generation = OPEN_FILES.generation

    def close(self) -> None:
        """Release every reader this dataset holds (the last user of a file closes it)."""
        with self.lock:
            if self.generation == OPEN_FILES.generation:
                for shard, reader in self.ready.items():
                    OPEN_FILES.release(self._keys[shard], reader)
            self.forget()
            self.swept = True

    def __len__(self) -> int:
        return len(self.ready) if self.generation == OPEN_FILES.generation else 0


def worker_init_fn(worker_id: int) -> None:
    """DataLoader worker_init_fn: set aside what the worker inherited (but the map-only readers a
    fork keeps, see ShardDataset.open_shards); it opens the rest lazily."""
    del worker_id
    len(OPEN_FILES)     # notices the new process id and forgets the parent's objects
