"""The row arena (read/row_arena.py): every ready shard's rows in one array of the process. Rows
read through it must be the shard's own bytes at every alignment, no slice may reach into the
next, row views must outlive the dataset, and nothing may stay mapped once they are gone. (A row
changed on disk under the arena: test_row_reads.test_a_row_changed_under_a_running_reader_is_refused.)"""
from __future__ import annotations

import gc
import mmap
import os
import sys
from pathlib import Path
from typing import List

import numpy as np
import pytest

import shardkit
from shardkit.formats.locating import map_file, map_rows
from shardkit.read.handles import arena_map_limit
from shardkit.read.openfiles import OPEN_FILES
from shardkit.read.row_arena import ARENA_MAPS, RowArena, file_offset

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena is Linux only")

PAGE = mmap.PAGESIZE


def _shard_file(path: Path, offset: int, rows: np.ndarray) -> None:
    """A file with rows' bytes at offset, other bytes (0xEE) around them."""
    path.write_bytes(b"\xee" * offset + rows.tobytes() + b"\xee" * 100)


def _mapped_rows(path: Path, offset: int, count: int, dtype: np.dtype, shape: tuple) -> "tuple[int, np.ndarray]":
    """A descriptor of the file and its rows as a reader makes them (map_rows over map_file)."""
    fd = os.open(path, os.O_RDONLY)
    view = map_file(fd, os.fstat(fd).st_size)
    return fd, map_rows(view, dtype, shape, count, offset)


@pytest.mark.parametrize("row_bytes, offsets", [
    (16, [9272, 9272 + 4096, 24, 4088]),      # rows straddle page ends
    (12, [4, 4096 - 4, 8192 + 1000]),          # a row size that does not divide the page
    (4, [0, 1, 2, 3, 8]),                      # only rows in the first one's phase are placed
])
def test_rows_through_the_arena_are_each_shards_own_bytes(tmp_path: Path, row_bytes: int, offsets: List[int]) -> None:
    dtype, shape = np.dtype("<f4"), (row_bytes // 4,)
    count = 3 * PAGE // row_bytes + 7      # several pages of rows
    shards = []
    for shard, offset in enumerate(offsets):
        data = np.arange(count * shape[0], dtype=dtype).reshape(count, *shape) + 1000 * (shard + 1)
        _shard_file(tmp_path / f"{shard}.bin", offset, data)
        shards.append((data, *_mapped_rows(tmp_path / f"{shard}.bin", offset, count, dtype, shape)))
    arena = RowArena.create(len(offsets), count, shards[0][2], offsets[0], arena_map_limit())
    assert arena is not None
    placed = []
    for shard, (data, fd, rows) in enumerate(shards):
        assert file_offset(rows) == offsets[shard]
        phase_matches = (offsets[shard] - offsets[0]) % np.gcd(row_bytes, PAGE) == 0
        assert arena.place(shard, fd, rows, offsets[shard]) == phase_matches
        os.close(fd)
        arena.publish(shard)
        placed.append(phase_matches)
    for shard, (data, _, rows) in enumerate(shards):      # checked after all are placed: none overlaps
        base = arena.bases[shard]
        assert (base >= 0) == placed[shard]
        if base >= 0:
            assert np.array_equal(arena.rows[base:base + count], data)
            assert not arena.rows[base].flags.writeable


def test_a_slice_never_reaches_into_the_next(tmp_path: Path) -> None:
    """Shards of the most rows, each starting just before a page end: placing every one after
    the other leaves each one's rows intact."""
    dtype, shape, count = np.dtype("<f4"), (4,), 1000
    shards = []
    for shard in range(6):
        offset = (shard + 1) * PAGE - 16 * (shard + 1)
        data = np.full((count, 4), shard + 1, dtype=dtype)
        _shard_file(tmp_path / f"{shard}.bin", offset, data)
        shards.append((data, offset, *_mapped_rows(tmp_path / f"{shard}.bin", offset, count, dtype, shape)))
    arena = RowArena.create(len(shards), count, shards[0][3], shards[0][1], arena_map_limit())
    assert arena is not None
    for shard, (_, offset, fd, rows) in enumerate(shards):
        assert arena.place(shard, fd, rows, offset)
        os.close(fd)
        arena.publish(shard)
    for shard, (data, *_) in enumerate(shards):
        assert np.array_equal(arena.rows[arena.bases[shard]:arena.bases[shard] + count], data)


def test_a_shard_is_read_through_its_slice_only_while_published(tmp_path: Path) -> None:
    data = np.ones((10, 4), dtype="<f4")
    _shard_file(tmp_path / "0.bin", 64, data)
    fd, rows = _mapped_rows(tmp_path / "0.bin", 64, 10, np.dtype("<f4"), (4,))
    arena = RowArena.create(1, 10, rows, 64, arena_map_limit())
    assert arena is not None and arena.bases == [-1]
    assert arena.place(0, fd, rows, 64)
    assert arena.bases == [-1]          # placed, not checked yet
    arena.publish(0)
    assert arena.bases[0] >= 0
    arena.withdraw(0)
    arena.publish(0)                    # a new reader that was not placed must not reuse the old place
    assert arena.bases == [-1]
    os.close(fd)


def test_no_arena_beyond_the_map_limit(tmp_path: Path) -> None:
    data = np.ones((10, 4), dtype="<f4")
    _shard_file(tmp_path / "0.bin", 64, data)
    fd, rows = _mapped_rows(tmp_path / "0.bin", 64, 10, np.dtype("<f4"), (4,))
    os.close(fd)
    assert RowArena.create(1000, 10, rows, 64, ARENA_MAPS.held + 2 * 1000) is None
    assert RowArena.create(1000, 10, rows, 64, ARENA_MAPS.held + 2 * 1000 + 1) is not None


@pytest.fixture()
def table(tmp_path: Path, fmt: str) -> Path:
    if fmt == "lmdb":
        pytest.skip("LMDB rows live in LMDB's own map")
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,c,label\n" + "".join(f"{i},{i * 0.5},{-i},c{i % 3}\n" for i in range(120)))
    dst = tmp_path / "ds"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=7, quiet=True)
    return dst


def _shard_maps(dst: Path) -> int:
    with open("/proc/self/maps") as maps:
        return sum(str(dst / "shards") in line for line in maps)


def test_every_ready_shard_is_read_through_the_arena(table: Path) -> None:
    OPEN_FILES.close_all()
    with shardkit.open_dataset(table, decode=None) as ds, \
            shardkit.open_dataset(table, decode=None, max_open_shards=1) as lazy:
        shards = len(ds.shard_starts) - 1
        first = [ds[i] for i in range(len(ds))]     # each shard opened, checked and published
        arena = ds._handles.arena
        assert arena is not None and all(base >= 0 for base in arena.bases)
        assert lazy._handles.arena is None           # its shards come and go: no arena
        for i in range(len(ds)):
            row, label = ds[i]
            assert row.base is arena.rows or row.base is arena.rows.base
            assert np.array_equal(row, lazy[i][0]) and label == lazy[i][1]
            assert np.array_equal(row, first[i][0])
        assert shards == 18


def test_row_views_outlive_the_dataset_and_nothing_stays_mapped(table: Path) -> None:
    OPEN_FILES.close_all()
    gc.collect()
    held = ARENA_MAPS.held
    ds = shardkit.open_dataset(table, decode=None)
    views = [ds[i][0] for i in range(len(ds))]
    expected = [view.copy() for view in views]
    assert ds._handles.arena is not None and ARENA_MAPS.held > held
    ds.close()
    OPEN_FILES.close_all()
    gc.collect()
    assert _shard_maps(table) > 0        # the views still hold the arena
    assert all(np.array_equal(view, copy) for view, copy in zip(views, expected))
    del views
    gc.collect()
    assert _shard_maps(table) == 0       # the dataset, still alive, let go of its arena
    assert ARENA_MAPS.held == held
    assert all(np.array_equal(ds[i][0], copy) for i, copy in enumerate(expected))     # reads on
    ds.close()
