"""Every ready shard's fixed-shape rows in one read-only array of the process (Linux).

A dataset over thousands of shards would otherwise make each row view from that shard's own
array: at 10,000 shards each such array is a cache miss of its own (benchmarks/read_parts.py). The
arena reserves one range of address space, read-only zero pages, and maps each shard's rows from
its file into its own slice of it (`MAP_FIXED | MAP_SHARED`, read-only), so that every row of every
placed shard is a row of the one array `rows`, at `bases[shard] + local`.

What keeps it safe:
- a shard is mapped from its checked descriptor, over the bytes its format says its rows are
  (`checked.CheckedShards.locate`: the format's record, checked, and its labels and CRC32s equal to
  the sample table's), and `bases[shard]` becomes its slice only once the mapping is made; until
  then, and once it is withdrawn, it is -1 and no read uses the slice;
- a shard always maps into its own slice, so no row address ever shows another shard's bytes, and
  a mapping stays until the arena is freed: the reserved range is an mmap object whose buffer every
  row view holds, so it is unmapped (with every mapping in it) only after the last view is gone;
- the rest of the range is readable zero pages, so touching it (printing a view's base) reads
  zeros instead of faulting;
- a mapping that fails leaves the arena unused from then on, and the arena is then never freed
  (a failed MAP_FIXED may leave a hole that other mappings fill; unmapping the range would unmap
  them).
"""
from __future__ import annotations

import math
import mmap
import threading
import weakref
from typing import Any, List, Optional

import numpy as np

from ..formats.locating import FileRows
from ..formats.mapping import MMAP, PAGE as _PAGE, address, map_over

#: The most address space one arena reserves (it costs no memory, only addresses).
MAX_RESERVED_BYTES = 1 << 44
#: The maps a placed shard adds (its mapping and the piece of the reserved range after it).
MAPS_PER_SHARD = 2
#: Arenas whose range may hold another mapping after a failed map: never freed (see module doc).
_KEPT: List[Any] = []


class _MapCount:
    """The maps that this process's arenas hold, against the share of the map limit they may take."""

    def __init__(self) -> None:
        self.held = 0
        self._lock = threading.Lock()

    def take(self, count: int, limit: int) -> bool:
        with self._lock:
            if self.held + count > limit:
                return False
            self.held += count
            return True

    def give_back(self, counted: List[int]) -> None:
        with self._lock:
            self.held -= counted[0]


ARENA_MAPS = _MapCount()


#: A mapping of at most this many bytes is filled in when made (MAP_POPULATE), where its reader
#: reads ahead: a small shard's rows then cost no page fault of their own at their first reads.
POPULATE_BYTES = 64 << 10


def _span(max_rows: int, row_bytes: int) -> int:
    """Rows in each shard's slice: its rows, the start of its first page before them and the end
    of its last page after them, and the rows it may take to line its first page up."""
    return max_rows + 2 * -(-_PAGE // row_bytes) + _PAGE // math.gcd(row_bytes, _PAGE)


class RowArena:
    """The rows of a dataset's shards in one `(slots, *shape)` array: shard k's rows are
    `rows[bases[k]:bases[k] + count]` once placed and published, `bases[k]` -1 otherwise."""

    def __init__(self, shards: int, max_rows: int, first: FileRows, phase: int, map_limit: int) -> None:
        self.row_dtype = first.row_dtype
        self.row_bytes = row_bytes = self.row_dtype.itemsize
        self._align = math.gcd(row_bytes, _PAGE)
        self._span = _span(max_rows, row_bytes)
        #: first * row_bytes steps through the page offsets in steps of _align: the inverse of
        #: row_bytes / _align modulo _PAGE / _align turns a page offset into the first row's residue.
        self._inverse = pow(row_bytes // self._align, -1, _PAGE // self._align)
        self._phase = phase
        size = -(-(shards * self._span * row_bytes + phase) // _PAGE) * _PAGE
        # Read-only private pages commit no memory (they are never written).
        self._range = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, prot=mmap.PROT_READ)
        self._start = address(self._range)
        self.rows = np.frombuffer(self._range, dtype=self.row_dtype, offset=phase, count=shards * self._span)
        self.bases: List[int] = [-1] * shards
        #: Each shard's first row of the mapping in its slice (-1: none yet), which a new mapping
        #: at the same place replaces without adding maps.
        self._mapped: List[int] = [-1] * shards
        self.usable = True
        self._map_limit = map_limit
        #: The maps this arena holds, given back once its range is unmapped (its last view freed).
        self._maps = [1]
        ARENA_MAPS.take(1, 1 << 62)
        weakref.finalize(self._range, ARENA_MAPS.give_back, self._maps)

    @classmethod
    def create(cls, shards: int, max_rows: int, first: FileRows, map_limit: int) -> Optional["RowArena"]:
        """An arena laid out for shards of at most max_rows rows like `first` (its first shard's,
        whose file offset fixes the alignment every shard shares), or None where it cannot be used:
        not Linux, more address space than allowed, or a map limit (the maps all arenas of the
        process may hold) too small for every shard."""
        row_bytes = first.row_dtype.itemsize
        if MMAP is None or row_bytes <= 0 or max_rows <= 0 or \
                ARENA_MAPS.held + MAPS_PER_SHARD * shards + 1 > map_limit:
            return None
        if shards * _span(max_rows, row_bytes) * row_bytes > MAX_RESERVED_BYTES:
            return None
        try:
            return cls(shards, max_rows, first, first.offset % _PAGE % math.gcd(row_bytes, _PAGE), map_limit)
        except (OSError, ValueError, OverflowError):
            return None

    def place(self, shard: int, fd: int, where: FileRows) -> bool:
        """Map a shard's checked rows (`where` they lie in the file open as fd) into the shard's
        slice, and read them from there; False when they cannot be (unlike layout, a failed map)."""
        self.bases[shard] = -1
        count, offset = where.row_count, where.offset
        if not self.usable or where.row_dtype != self.row_dtype or not 0 < count <= self._span \
                or offset < 0:
            return False
        in_page = offset % _PAGE
        if (in_page - self._phase) % self._align:
            return False
        # The first row index from the slice start past in_page whose address is in_page past a
        # page start: first * row_bytes = in_page - phase (mod _PAGE), solved in closed form.
        lowest, steps = shard * self._span + -(-in_page // self.row_bytes), _PAGE // self._align
        residue = (in_page - self._phase) // self._align * self._inverse % steps
        first = lowest + (residue - lowest) % steps
        begin = self._start + self._phase + first * self.row_bytes - in_page
        assert begin % _PAGE == 0
        length = -(-(in_page + count * self.row_bytes) // _PAGE) * _PAGE
        if begin + length > self._start + self._phase + (shard + 1) * self._span * self.row_bytes:
            return False        # cannot happen with the slack of _span; never map into the next slice
        if self._mapped[shard] != first:       # a new mapping, not one over the shard's last
            if not ARENA_MAPS.take(MAPS_PER_SHARD, self._map_limit):
                return False
            self._maps[0] += MAPS_PER_SHARD
        if not map_over(begin, length, fd, offset - in_page, where.readahead, populate=length <= POPULATE_BYTES):
            self.usable = False
            _KEPT.append(self)
            return False
        self._mapped[shard] = self.bases[shard] = first
        return True

    def withdraw(self, shard: int) -> None:
        """Reads of the shard no longer use its slice; its mapping stays until the arena is freed,
        or the shard is placed again over it."""
        self.bases[shard] = -1
