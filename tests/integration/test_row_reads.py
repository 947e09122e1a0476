"""Reads of fixed-shape rows from ready shards: a dataset indexes each shard's published rows
itself (read/shards.py, `_row`). They must equal the reader path, stay within the open-shard
budget, keep its LRU order, and still refuse a row whose bytes changed."""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import shardkit
from shardkit.read.openfiles import OPEN_FILES

from ..conftest import lru_held_by_another_thread

SHARDS, PER_SHARD = 6, 5
ROWS = SHARDS * PER_SHARD


def _value(i: int) -> "tuple[float, float]":
    return float(i), i * 0.5 + 1000.0


@pytest.fixture()
def rows_dataset(tmp_path: Path, fmt: str) -> Path:
    csv = tmp_path / "rows.csv"
    csv.write_text("a,b,label\n" + "".join(f"{a},{b},c{i % 3}\n" for i in range(ROWS) for a, b in [_value(i)]))
    dst = tmp_path / "ds"
    shardkit.convert(str(csv), str(dst), format=fmt, label_column="label", samples_per_shard=PER_SHARD, quiet=True)
    return dst


def _shard_maps(dst: Path) -> int:
    """How many distinct shard files of dst this process has mapped (from /proc/self/maps)."""
    shards = str(dst / "shards")
    with open("/proc/self/maps") as maps:
        return len({line.split(None, 5)[-1].strip() for line in maps if shards in line})


def _offsets(data: bytes, part: bytes) -> "list[int]":
    found, start = [], data.find(part)
    while start >= 0:
        found.append(start)
        start = data.find(part, start + 1)
    return found


def test_reads_of_ready_shards_equal_what_was_converted(rows_dataset: Path) -> None:
    """Every row read twice (the first read opens its shard, the second indexes the published
    rows), raw and decoded, against the values written."""
    expected = [(np.array(_value(i), np.float32), i % 3) for i in range(ROWS)]
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None) as raw, shardkit.open_dataset(rows_dataset) as decoded:
        for _ in range(2):
            for i in np.random.default_rng(0).permutation(ROWS).tolist():
                payload, label = raw[i]
                assert label == expected[i][1] and payload.tolist() == expected[i][0].tolist()
                assert not payload.flags.writeable          # a view of the map, as the reader gives
                tensor, label = decoded[i]
                assert label == expected[i][1] and tensor.dtype == torch.float32
                assert tensor.tolist() == expected[i][0].tolist()
                tensor += 1                                 # a private copy: the shard is untouched
        assert [raw[i][0].tolist() for i in range(ROWS)] == [row.tolist() for row, _ in expected]
        assert [raw.read_encoded(i).crc32 for i in range(ROWS)] == \
            [raw.reader(i // PER_SHARD).read(i % PER_SHARD).crc32 for i in range(ROWS)]


def test_an_evicted_shard_leaves_no_map_behind(rows_dataset: Path) -> None:
    """Published rows keep their shard's map alive, so eviction must drop them: under a budget of
    2, reading every shard leaves at most 2 shard files mapped."""
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        for _ in range(2):
            for i in range(ROWS):
                ds[i]
        assert sum(rows is not None for rows in ds._handles.rows) <= 2
        assert _shard_maps(rows_dataset) <= 2
    assert _shard_maps(rows_dataset) == 0


def test_closing_every_shard_of_the_process_unmaps_published_rows(rows_dataset: Path) -> None:
    """OPEN_FILES.close_all() leaves no shard mapped, even with every shard's rows published, and
    the dataset reads on afterwards."""
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    before = [ds[i][0].tolist() for i in range(ROWS) for _ in range(2)]
    assert _shard_maps(rows_dataset) == SHARDS
    OPEN_FILES.close_all()
    assert _shard_maps(rows_dataset) == 0
    assert [ds[i][0].tolist() for i in range(ROWS) for _ in range(2)] == before
    ds.close()


def test_a_shard_read_through_its_rows_counts_as_recently_used(rows_dataset: Path) -> None:
    """Under a full budget, a read of a ready shard moves it to the young end of the LRU, so the
    next open evicts the other one."""
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        ds[0], ds[PER_SHARD]                # shards 0 and 1 ready, 0 the oldest
        ds[1]                               # shard 0 again
        ds[2 * PER_SHARD]                   # opens shard 2: shard 1 must go, not shard 0
        assert sorted(ds._handles.ready) == [0, 2]


def test_a_row_changed_under_a_running_reader_is_refused(rows_dataset: Path) -> None:
    """verify_checksums=True: a row whose bytes change in the file after its shard was opened (and
    its rows published) fails its CRC32 at the next read, naming shard and sample."""
    target = 7                                          # shard 1, sample 2
    shard = rows_dataset / "shards"
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None, verify_checksums=True) as ds:
        assert ds[target][0].tolist() == list(_value(target))
        ds[target - 1]                                  # its shard is ready and published
        row = struct.pack("<2f", *_value(target))
        hits = [(path, _offsets(path.read_bytes(), row)) for path in sorted(shard.rglob("*")) if path.is_file()]
        hits = [(path, offsets) for path, offsets in hits if offsets]
        assert len(hits) == 1                           # one file (LMDB may keep a stale page too)
        path, offsets = hits[0]
        fd = os.open(path, os.O_WRONLY)
        try:
            for offset in offsets:
                os.pwrite(fd, struct.pack("<f", 99.0), offset)
        finally:
            os.close(fd)
        with pytest.raises(shardkit.CorruptSampleError) as caught:
            ds[target]
        assert caught.value.global_index == target and "CRC32" in str(caught.value)
        assert ds[target + 1][0].tolist() == list(_value(target + 1))


KEEPS_MAP = r"""
import mmap, os, sys
import shardkit
from shardkit.read.openfiles import OPEN_FILES

ds = shardkit.open_dataset(sys.argv[1], decode=None)
rows = ds.reader(1).rows()
expected = rows.tobytes()
OPEN_FILES.close_all()                 # closes the reader and (tries to) close its map
spare = [mmap.mmap(-1, 1 << 16) for _ in range(256)]     # new maps that could take its addresses
for one in spare:
    one.write(b"\xff" * (1 << 16))
print("same" if rows.tobytes() == expected else "changed")
"""


def test_rows_a_reader_gave_keep_its_map_after_it_closes(rows_dataset: Path, fmt: str) -> None:
    """rows() holds a buffer export of the shard's map: closing the reader cannot unmap the memory
    under it (an array made with np.ndarray(buffer=map) holds none; its map then closes and the
    addresses go to the next maps, so the rows read other bytes)."""
    if fmt == "lmdb":
        pytest.skip("LMDB rows live in LMDB's own map and are copied out: "
                    "test_lmdb_rows_are_copies_and_none_once_their_map_is_gone")
    out = subprocess.run([sys.executable, "-c", KEEPS_MAP, str(rows_dataset)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "same"


LMDB_ROWS = r"""
import mmap, sys
import shardkit
from shardkit.read.openfiles import OPEN_FILES

per_shard = int(sys.argv[2])
ds = shardkit.open_dataset(sys.argv[1], decode=None)
ds[per_shard]                                  # opens shard 1 and publishes its rows
row = ds[per_shard + 1][0]                     # read through them
rows = ds._handles.rows[1]
assert type(rows).__name__ == "_BlockRows", type(rows)
expected = rows[1].tobytes()
assert row.tobytes() == expected and not row.flags.writeable
OPEN_FILES.close_all()                         # closes the environment: LMDB unmaps the file
spare = [mmap.mmap(-1, 1 << 16) for _ in range(256)]     # new maps that could take its addresses
for one in spare:
    one.write(b"\xff" * (1 << 16))
print("none" if rows[1] is None else "a row")
print("same" if row.tobytes() == expected else "changed")
print("same" if ds[per_shard + 1][0].tobytes() == expected else "changed")
"""


def test_lmdb_rows_are_copies_and_none_once_their_map_is_gone(rows_dataset: Path, fmt: str) -> None:
    """An LMDB shard's rows come from LMDB's own map, which no Python object pins: its row source
    copies each row out under the environment's lock, so a row read earlier keeps its bytes once
    the file is unmapped, and the source itself gives None then (never a read of the unmapped
    block), after which the dataset opens the shard again."""
    if fmt != "lmdb":
        pytest.skip("HDF5 and PT rows are views that pin their map (the test above)")
    out = subprocess.run([sys.executable, "-c", LMDB_ROWS, str(rows_dataset), str(PER_SHARD)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["none", "same", "same"]


def test_a_row_source_closed_under_another_thread_sends_the_read_to_the_reader(
        rows_dataset: Path, fmt: str) -> None:
    """A thread can take a shard's LMDB row source just before another thread's eviction closes its
    environment: the read then finds the source closed and goes through the (reopened) reader."""
    if fmt != "lmdb":
        pytest.skip("HDF5 and PT rows are views that pin their map")
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        ds[PER_SHARD]
        stale = ds._handles.rows[1]
        OPEN_FILES.close_all()                  # its environment closes
        ds[PER_SHARD]                           # shard 1 open again, its rows published anew
        ds._handles.rows[1] = stale             # what the other thread still holds
        assert ds[PER_SHARD + 1][0].tolist() == list(_value(PER_SHARD + 1))


def test_threads_reading_under_a_small_budget_get_the_right_rows(rows_dataset: Path) -> None:
    """Four threads read one dataset in random orders while its budget of 2 evicts shards under
    them: every read gives the row written, and no read fails."""
    import threading
    expected = [list(_value(i)) for i in range(ROWS)]
    errors: "list[BaseException]" = []
    wrong: "list[int]" = []
    OPEN_FILES.close_all()
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        def read(seed: int) -> None:
            try:
                for i in np.random.default_rng(seed).integers(0, ROWS, 3000).tolist():
                    if ds[i][0].tolist() != expected[i]:
                        wrong.append(i)
            except BaseException as exc:      # noqa: BLE001 - reported below
                errors.append(exc)
        threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
        previous = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)           # switch threads as often as the interpreter allows
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        finally:
            sys.setswitchinterval(previous)
    assert not errors, repr(errors[0])
    assert not wrong


def _read_first(ds: shardkit.ShardDataset, expected: "list[float]") -> None:
    raise SystemExit(0 if ds[0][0].tolist() == expected else 3)


def test_a_child_forked_while_a_thread_holds_the_dataset_lock_still_reads(rows_dataset: Path) -> None:
    """A thread of the parent holds the dataset's LRU lock when the process forks (a DataLoader
    forking its workers while a thread reads): the child makes its own lock and reads."""
    import multiprocessing
    OPEN_FILES.close_all()
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    ds[0]
    try:
        with lru_held_by_another_thread(ds):
            child = multiprocessing.get_context("fork").Process(target=_read_first, args=(ds, list(_value(0))))
            child.start()
            child.join(30)
            alive = child.is_alive()
            if alive:
                child.kill()
                child.join()
    finally:
        ds.close()
    assert not alive, "the child waited forever for a lock its parent's thread held at the fork"
    assert child.exitcode == 0
