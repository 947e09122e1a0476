"""One dataset's open shards in one process: the only owner of them.

A dataset reads a sample either as a fixed-shape row (`row()`: the shard's rows located in its file
and mapped, in the row arena when every shard of the dataset fits the budget) or through a checked
reader (`reader()`, under `with cache:` so that no other thread closes it meanwhile). Both are
opened through checked.CheckedShards, which applies the same checks either way.

At most `capacity` shards are open at once (least recently used first out), and all the datasets
of a process together at most budget.process_budget(). An open shard holds at most one descriptor
(an h5py file or an LMDB environment: located readers and row maps hold none, formats/mapping.py).

Across a fork (runtime/forks.py) a child keeps what a fork copies whole: row maps, the arena and
readers that are one read-only map (`inheritable`); the parent's other readers are set aside, never
used or closed in the child. `prepare()` opens shards in the parent so that DataLoader workers
forked afterwards inherit them instead of opening every shard again each epoch.

A shard's file changed while open (read/watch.py, looked at before each batch) is set aside and
opened again, with every check, at its next read.

A remote dataset's shard files lie in its local cache (remote/cache.py): a shard is pinned there
from its open to its setting aside, so the cache never evicts a file in use.
"""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Iterable, List, Optional, Tuple

import numpy as np

from ..formats.checked import CheckedShards
from ..formats.locating import FileRows
from ..formats.mapping import map_region
from ..formats.base import ShardReader
from ..manifest import SHARDS_DIR
from ..runtime.forks import FORK_COUNT, watch
from ..sample_table import TABLE_NAME, SampleTable
from .budget import OPEN_IN_PROCESS, arena_map_limit, process_budget
from .row_arena import RowArena
from .watch import EVERYTHING, FileWatch

#: A shard whose rows are not located in its file (read through a reader): its entry in `_rows`.
NOT_ROWS = object()
#: Shards whose rows open_rows checks together at most (their descriptors are open meanwhile).
OPEN_TOGETHER = 256
#: Readers of a parent that a forked child must neither use nor close: kept alive here.
_INHERITED: List[ShardReader] = []


@dataclass(frozen=True)
class CacheInfo:
    """What a dataset holds open in this process (`ds.shard_cache.info()`)."""

    capacity: int                   # max_open_shards
    readers: Tuple[int, ...]        # shards with an open reader
    mapped: Tuple[int, ...]         # shards whose rows are mapped on their own
    placed: Tuple[int, ...]         # shards whose rows are read from the row arena
    open: Tuple[int, ...]           # shards counted against the capacity, least recently used first


class ShardCache:
    """A dataset's open shards in this process (see the module doc)."""

    def __init__(self, shards: CheckedShards, count: int, capacity: int, max_rows: int) -> None:
        self._shards, self._count, self.capacity, self._max_rows = shards, count, capacity, max_rows
        self._lock = threading.RLock()
        self._forks = watch()
        self._lru: "OrderedDict[int, None]" = OrderedDict()
        self._readers: List[Optional[ShardReader]] = [None] * count
        self._rows: List[Any] = [None if max_rows else NOT_ROWS] * count
        self._bases: List[int] = [-1] * count
        self._arena: Optional[RowArena] = None
        self._arena_rows: Any = None
        #: Whether rows may still go to an arena: every shard fits the budget, and none failed.
        self._arena_open = bool(max_rows) and count <= min(capacity, process_budget())
        self._placed = 0        # shards placed in the arena
        # a remote dataset's cached files never change: named by content, renamed in once checked
        self._watch = FileWatch(shards.root, ["", SHARDS_DIR] if shards.files is None else [])
        #: The sample table's file name (a field's own in a dataset of fields)
        self._table_name = (shards.manifest.sample_table or {}).get("path", TABLE_NAME)
        #: The sample table the shards were checked against in this process (None before the first).
        self.table: Optional[SampleTable] = None

    # ---- reads -------------------------------------------------------------------------
    def row(self, shard: int, local: int) -> Any:
        """The fixed-shape row `local` of a shard as a read-only view, when its rows are located in
        its file (opened and checked on first use); None when they are not: read it through a reader."""
        base = self._bases[shard]
        if base >= 0:
            return self._arena_rows[base + local]
        rows = self._rows[shard]
        if rows is None:
            return self.row(shard, local) if self._open_rows(shard) else None
        if rows is NOT_ROWS:
            return None
        if len(self._lru) >= self.capacity:     # the order matters only once something must go
            try:
                self._lru.move_to_end(shard)
            except KeyError:        # set aside by another thread a moment ago: these rows stay valid
                pass
        return rows[local]

    def reader(self, shard: int) -> ShardReader:
        """The shard's checked reader (opened on first use). Call it inside `with cache:`, which keeps
        other threads from closing it while it is used."""
        reader = self._readers[shard]
        if reader is None or self._forks != FORK_COUNT[0]:
            return self._open_reader(shard)
        if len(self._lru) >= self.capacity:
            self._lru.move_to_end(shard)
        return reader

    def __enter__(self) -> "ShardCache":
        if self._forks != FORK_COUNT[0]:
            self._after_fork()
        self._lock.acquire()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._lock.release()

    def check_files(self) -> None:
        """Set aside the open shards (and the sample table) whose files changed since they opened:
        called before each batch (one read of an inotify descriptor, which finds nothing almost always)."""
        changed = self._watch.changed()
        if not changed:
            return
        with self:
            if EVERYTHING in changed or self._table_name in changed:
                self._close_all()
                return
            for shard in range(self._count):
                if self._shards.where(shard)[1] in changed:
                    self._set_aside(shard)

    # ---- opening -----------------------------------------------------------------------
    def _open_file(self, shard: int) -> "tuple[int, bool]":
        """(a checked descriptor of the shard, whether the shard was open before), once there is
        room for it; the sample table mapped. The caller ends with _close_file (a pair of calls,
        not a generator context manager, which costs microseconds of every shard's first open)."""
        self._watch.start()
        self._make_room()
        was_open = self._is_open(shard)
        fd = self._shards.open_file(shard)
        try:
            if self.table is None:
                self.table = self._shards.table()
        except BaseException:
            self._close_file(shard, fd, was_open)
            raise
        return fd, was_open

    def _close_file(self, shard: int, fd: int, was_open: bool) -> None:
        """Close what _open_file gave; the shard's file stays pinned if the shard was not open
        before and is now."""
        os.close(fd)
        if was_open or not self._is_open(shard):
            self._shards.release(shard)

    def _is_open(self, shard: int) -> bool:
        return shard in self._lru or self._bases[shard] >= 0

    def _open_reader(self, shard: int) -> ShardReader:
        with self:
            reader = self._readers[shard]
            if reader is not None:
                return reader
            fd, was_open = self._open_file(shard)
            try:
                reader = self._shards.reader(shard, fd)
                self._readers[shard] = reader
                self._note_open(shard)
            finally:
                self._close_file(shard, fd, was_open)
            return reader

    def _open_rows(self, shard: int) -> bool:
        """Locate a shard's rows and map them (in the arena when it may take them); False when
        they are not located, and the shard is read through a reader from then on."""
        with self:
            if self._bases[shard] >= 0 or self._rows[shard] is not None:
                return self._rows[shard] is not NOT_ROWS
            fd, was_open = self._open_file(shard)
            try:
                where = self._shards.locate(shard, fd)
                if where is None:
                    self._rows[shard] = NOT_ROWS
                    return False
                if self._place(shard, fd, where):
                    return True
                view, start = map_region(fd, where.offset, where.row_count * where.row_dtype.itemsize,
                                         where.readahead)
                self._rows[shard] = np.frombuffer(view, dtype=where.row_dtype, count=where.row_count, offset=start)
                self._note_open(shard)
            finally:
                self._close_file(shard, fd, was_open)
            return True

    def open_rows(self, shards: Iterable[int]) -> None:
        """Open the rows of these shards (a batch's) that are not open yet, as their first reads
        would, with their checks made together (checked.CheckedShards.locate_many), while every
        shard of the dataset fits the row arena; otherwise each opens at its first read. The
        descriptors open at once are those of shards about to be open, so never more than the
        capacity."""
        if not self._arena_open or self._placed == self._count:
            return
        with self:
            todo = [shard for shard in shards if self._bases[shard] < 0 and self._rows[shard] is None]
            for first in range(0, len(todo), OPEN_TOGETHER):
                if not self._arena_open:
                    return
                self._open_rows_together(todo[first:first + OPEN_TOGETHER])

    def _open_rows_together(self, shards: List[int]) -> None:
        opened: List[Tuple[int, int, bool]] = []
        try:
            for shard in shards:
                if OPEN_IN_PROCESS[0] + len(opened) >= process_budget():
                    break           # the rest open one at a time, at their first reads
                fd, was_open = self._open_file(shard)
                opened.append((shard, fd, was_open))
            wheres = self._shards.locate_many([shard for shard, _, _ in opened], [fd for _, fd, _ in opened])
            for (shard, fd, _), where in zip(opened, wheres):
                if where is None:
                    self._rows[shard] = NOT_ROWS
                elif not self._place(shard, fd, where):
                    return          # the arena cannot take them: each is mapped at its first read
        finally:
            for shard, fd, was_open in opened:
                self._close_file(shard, fd, was_open)

    def _place(self, shard: int, fd: int, where: FileRows) -> bool:
        """Map a shard's rows into the dataset's row arena (made for the first); False where the
        arena cannot take them."""
        if not self._arena_open:
            return False
        if self._arena is None:
            self._arena = RowArena.create(self._count, self._max_rows, where, arena_map_limit())
            if self._arena is None:
                self._arena_open = False
                return False
            self._arena_rows, self._bases = self._arena.rows, self._arena.bases
        if not self._arena.place(shard, fd, where):
            self._arena_open = self._arena.usable
            return False
        OPEN_IN_PROCESS[0] += 1
        self._placed += 1
        return True

    def _note_open(self, shard: int) -> None:
        if shard not in self._lru:
            self._lru[shard] = None
            OPEN_IN_PROCESS[0] += 1

    def _make_room(self) -> None:
        """Set aside this dataset's least recently used shards while it holds `capacity` of them,
        or the process holds as many as its budget allows."""
        limit = process_budget()
        while self._lru and (len(self._lru) >= self.capacity or OPEN_IN_PROCESS[0] >= limit):
            self._set_aside(next(iter(self._lru)))

    def _set_aside(self, shard: int) -> None:
        """Close a shard's reader and drop its rows (a map still viewed closes with its last view)."""
        was_open = self._is_open(shard)
        reader = self._readers[shard]
        self._readers[shard] = None
        if self._rows[shard] is not NOT_ROWS:
            self._rows[shard] = None
        if self._lru.pop(shard, 0) is None:
            OPEN_IN_PROCESS[0] -= 1
        if self._bases[shard] >= 0 and self._arena is not None:
            self._arena.withdraw(shard)
            OPEN_IN_PROCESS[0] -= 1
            self._placed -= 1
        if reader is not None:
            reader.close()
        if was_open:
            self._shards.release(shard)

    def prepare(self) -> int:
        """Open the first `capacity` shards now (their rows located and mapped without a reader
        where they can be), as their first reads would; how many are open. DataLoader workers
        forked afterwards inherit them (readers only when they are one read-only map)."""
        first = range(min(self._count, self.capacity, process_budget()))
        self.open_rows(first)
        for shard in first:
            if not self._open_rows(shard):
                with self:
                    self.reader(shard)
        info = self.info()
        return len(set(info.open) | set(info.placed))

    # ---- forks, closing, state ---------------------------------------------------------
    def _after_fork(self) -> None:
        """In a forked child (before its first use of the cache here): a new lock (another thread
        of the parent may have held the old one), and of the readers only those a fork copies
        whole; the parent's others are set aside untouched (closing them could disturb it)."""
        self._lock = threading.RLock()
        self._forks = FORK_COUNT[0]
        kept: "OrderedDict[int, None]" = OrderedDict()
        for shard in range(self._count):
            reader = self._readers[shard]
            if reader is not None and not reader.inheritable:
                _INHERITED.append(reader)
                self._readers[shard] = reader = None
            rows = self._rows[shard]
            if reader is not None or (rows is not None and rows is not NOT_ROWS):
                kept[shard] = None
        order = [shard for shard in self._lru if shard in kept]
        self._lru = OrderedDict((shard, None) for shard in order + [s for s in kept if s not in order])
        self._shards.forked([shard for shard in range(self._count) if self._is_open(shard)])

    def _close_all(self) -> None:
        for shard in list(self._lru):
            self._set_aside(shard)
        if self._arena is not None:
            placed = [shard for shard, base in enumerate(self._bases) if base >= 0]
            OPEN_IN_PROCESS[0] -= len(placed)
            for shard in placed:
                self._shards.release(shard)
        self._arena = self._arena_rows = None     # unmapped once no row view holds it
        self._bases = [-1] * self._count
        self._placed = 0
        self._arena_open = bool(self._max_rows) and self._count <= min(self.capacity, process_budget())
        self._rows = [None if self._max_rows else NOT_ROWS] * self._count
        self.table = None

    def close(self) -> None:
        """Close every shard of this dataset in this process (reading again opens them anew)."""
        with self:
            self._close_all()
            self._shards.close()
            self._watch.close()

    def info(self) -> CacheInfo:
        """What is open now (a snapshot)."""
        with self:
            real = [rows is not None and rows is not NOT_ROWS for rows in self._rows]
            return CacheInfo(self.capacity,
                             tuple(s for s in range(self._count) if self._readers[s] is not None),
                             tuple(s for s in range(self._count) if real[s]),
                             tuple(s for s in range(self._count) if self._bases[s] >= 0),
                             tuple(self._lru))

    def __reduce__(self) -> Tuple[Any, ...]:
        """Pickled (to a spawned DataLoader worker) as a new, empty cache."""
        return ShardCache, (self._shards, self._count, self.capacity, self._max_rows)


def worker_init_fn(worker_id: int) -> None:
    """DataLoader worker_init_fn. A worker notices by itself that it was forked (runtime/forks.py)
    and sets aside what it must not use of its parent's open shards; this hook does nothing more
    and is kept so that loaders written with it go on working."""
    del worker_id
