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
from shardkit.formats.locating import FileRows, map_file, map_rows, rows_in_file
from shardkit.read.handles import arena_map_limit
from shardkit.read.openfiles import OPEN_FILES
from shardkit.read.row_arena import ARENA_MAPS, RowArena

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the arena is Linux only")

PAGE = mmap.PAGESIZE


def _shard_file(path: Path, offset: int, rows: np.ndarray) -> None:
    """A file with rows' bytes at offset, other bytes (0xEE) around them."""
    path.write_bytes(b"\xee" * offset + rows.tobytes() + b"\xee" * 100)


def _mapped_rows(path: Path, offset: int, count: int, dtype: np.dtype, shape: tuple) -> "tuple[int, FileRows]":
    """A descriptor of the file and where its rows lie, found as a reader's are (map_rows over map_file)."""
    fd = os.open(path, os.O_RDONLY)
    view = map_file(fd, os.fstat(fd).st_size)
    where = rows_in_file(map_rows(view, dtype, shape, count, offset))
    assert where is not None
    return fd, where


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
    arena = RowArena.create(len(offsets), count, shards[0][2], arena_map_limit())
    assert arena is not None
    placed = []
    for shard, (data, fd, rows) in enumerate(shards):
        assert rows.offset == offsets[shard] and rows.row_count == count
        phase_matches = (offsets[shard] - offsets[0]) % np.gcd(row_bytes, PAGE) == 0
        assert arena.place(shard, fd, rows) == phase_matches
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
    arena = RowArena.create(len(shards), count, shards[0][3], arena_map_limit())
    assert arena is not None
    for shard, (_, offset, fd, rows) in enumerate(shards):
        assert arena.place(shard, fd, rows)
        os.close(fd)
        arena.publish(shard)
    for shard, (data, *_) in enumerate(shards):
        assert np.array_equal(arena.rows[arena.bases[shard]:arena.bases[shard] + count], data)


def test_a_shard_is_read_through_its_slice_only_while_published(tmp_path: Path) -> None:
    data = np.ones((10, 4), dtype="<f4")
    _shard_file(tmp_path / "0.bin", 64, data)
    fd, rows = _mapped_rows(tmp_path / "0.bin", 64, 10, np.dtype("<f4"), (4,))
    arena = RowArena.create(1, 10, rows, arena_map_limit())
    assert arena is not None and arena.bases == [-1]
    assert arena.place(0, fd, rows)
    assert arena.bases == [-1]          # placed, not checked yet
    arena.publish(0)
    assert arena.bases[0] >= 0
    arena.withdraw(0)
    arena.publish(0)                    # a new reader that was not placed must not reuse the old place
    assert arena.bases == [-1]
    assert arena.place(0, fd, rows)
    arena.publish(0)
    assert not arena.place(0, fd, rows._replace(offset=66))     # a new reader that cannot be placed:
    assert arena.bases == [-1]          # reads must not go on through the old mapping
    os.close(fd)


def test_no_arena_beyond_the_map_limit(tmp_path: Path) -> None:
    data = np.ones((10, 4), dtype="<f4")
    _shard_file(tmp_path / "0.bin", 64, data)
    fd, rows = _mapped_rows(tmp_path / "0.bin", 64, 10, np.dtype("<f4"), (4,))
    os.close(fd)
    assert RowArena.create(1000, 10, rows, ARENA_MAPS.held + 2 * 1000) is None
    assert RowArena.create(1000, 10, rows, ARENA_MAPS.held + 2 * 1000 + 1) is not None


@pytest.fixture()
def table(tmp_path: Path, fmt: str) -> Path:
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


def _lmdb_table(tmp_path: Path, rows: int, columns: int, per_shard: int) -> Path:
    csv = tmp_path / "wide.csv"
    header = ",".join(f"c{column}" for column in range(columns))
    csv.write_text(header + ",label\n" + "".join(
        ",".join(str(row * columns + column) for column in range(columns)) + f",k{row % 2}\n" for row in range(rows)))
    dst = tmp_path / "lmdb"
    shardkit.convert(str(csv), str(dst), format="lmdb", label_column="label", samples_per_shard=per_shard, quiet=True)
    return dst


def _block_page(path: Path) -> "tuple[int, int]":
    """(page number, offset in the page) of an LMDB shard's one block of rows, as LMDB maps it."""
    import ctypes
    import lmdb
    env = lmdb.open(str(path), subdir=False, readonly=True, lock=False)
    try:
        with env.begin(buffers=True) as txn:
            address = np.frombuffer(txn.get((0).to_bytes(8, "big")), np.uint8).ctypes.data
            page = int.from_bytes(ctypes.string_at(address - address % PAGE, 8), sys.byteorder)
            return page, address % PAGE
    finally:
        env.close()


def test_lmdb_rows_are_placed_only_where_the_file_holds_the_block_lmdb_reads(tmp_path: Path) -> None:
    """An LMDB shard is placed from its block's page number, which the page's own header gives: a
    header that lies (names another page) must not place the shard over other bytes of the file."""
    dst = _lmdb_table(tmp_path, 60, 3, 7)
    shard_files = sorted((dst / "shards").iterdir())
    lying = shard_files[2]
    page, _ = _block_page(lying)
    with open(lying, "r+b") as handle:     # the leaf page's header names the first page (LMDB's meta)
        handle.seek(page * PAGE)
        handle.write((0).to_bytes(8, sys.byteorder))
    OPEN_FILES.close_all()
    with shardkit.open_dataset(dst, decode=None) as ds:
        values = [ds[i] for i in range(len(ds))]
        arena = ds._handles.arena
        assert arena is not None
        assert arena.bases[2] == -1 and all(base >= 0 for shard, base in enumerate(arena.bases) if shard != 2)
        for i, (row, label) in enumerate(values):
            assert row.tolist() == [3 * i, 3 * i + 1, 3 * i + 2] and label == i % 2


def test_lmdb_shards_of_several_blocks_read_through_their_blocks(tmp_path: Path) -> None:
    """Rows of 8,000 bytes: 8 to a block, so shards of 20 rows span blocks (read through LMDB's map)
    and only the last shard, of 7, is placed; every row reads the same either way."""
    dst = _lmdb_table(tmp_path, 127, 2000, 20)
    OPEN_FILES.close_all()
    with shardkit.open_dataset(dst, decode=None) as ds:
        rows = [ds[i][0] for i in range(len(ds))]
        arena = ds._handles.arena
        assert arena is not None and arena.bases == [-1] * 6 + [arena.bases[6]] and arena.bases[6] >= 0
        assert rows[-1].base is arena.rows or rows[-1].base is arena.rows.base
        for i, row in enumerate(rows):
            assert np.array_equal(row, np.arange(2000 * i, 2000 * (i + 1), dtype=row.dtype))


def _arena_mappings(arena: RowArena, dst: Path) -> "List[dict]":
    """The arena's mappings of DST's shard files, from /proc/self/smaps: their Rss (kB) and VmFlags."""
    low = arena.rows.__array_interface__["data"][0]
    high = low + arena.rows.nbytes
    found, current = [], None
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):
                begin = int(head[0].split("-")[0], 16)
                ours = str(dst / "shards") in line and low - PAGE <= begin < high
                current = {"rss": 0, "flags": []} if ours else None
                if current is not None:
                    found.append(current)
            elif current is not None and head[0] == "Rss:":
                current["rss"] = int(head[1])
            elif current is not None and head[0] == "VmFlags:":
                current["flags"] = head[1:]
    return found


@pytest.mark.parametrize("readahead", [True, False])
def test_the_arena_reads_ahead_as_the_reader_does(table: Path, fmt: str, readahead: bool) -> None:
    """With readahead off (a dataset larger than RAM) the arena's mappings read only the pages a
    row needs (MADV_RANDOM, as the reader's own map); with it on, a small shard's mapping is
    filled in when made, so its first reads take no page fault."""
    if fmt == "pt" and not readahead:
        pytest.skip("PT has no readahead option")
    OPEN_FILES.close_all()
    options = {} if fmt == "pt" else {"readahead": readahead}
    with shardkit.open_dataset(table, decode=None, **options) as ds:
        ds.open_shards()                # placed, no row read yet
        arena = ds._handles.arena
        assert arena is not None
        mappings = _arena_mappings(arena, table)
        assert len(mappings) == len(ds.shard_starts) - 1
        for mapping in mappings:
            assert ("rr" in mapping["flags"]) == (not readahead)
            assert (mapping["rss"] > 0) == readahead
