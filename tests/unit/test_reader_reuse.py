"""Shard readers: one per file in a process, each dataset with its own LRU and close() (across a fork:
tests/integration/test_fork_inheritance.py)."""
from __future__ import annotations

from pathlib import Path

import shardkit
from shardkit.read.handles import HANDLES


def test_reader_is_reopened_after_handles_close(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    first = ds[0]
    reader = ds.reader(0)
    assert ds.reader(0) is reader
    HANDLES.close_all()
    assert ds.reader(0) is not reader
    assert ds[0] == first
    HANDLES.close_all()


def test_datasets_keep_their_own_capacity_and_share_readers(dataset_dir: Path) -> None:
    HANDLES.close_all()
    wide = shardkit.open_dataset(dataset_dir, decode=None, max_open_shards=8)
    narrow = shardkit.open_dataset(dataset_dir, decode=None, max_open_shards=1)
    expected = [wide[i] for i in range(len(wide))]
    readers = [wide.reader(shard) for shard in range(8)]
    assert [narrow[i] for i in range(len(narrow))] == expected      # cycles narrow's one slot through all 8
    assert len(narrow._handles) == 1 and len(wide._handles) == 8
    assert [wide.reader(shard) for shard in range(8)] == readers    # narrow evicted none of wide's readers
    assert narrow.reader(3) is wide.reader(3)                       # one reader per file and options
    assert [wide[i] for i in range(len(wide))] == expected
    assert len(HANDLES) == 8
    HANDLES.close_all()


def test_close_releases_only_its_own_references(dataset_dir: Path) -> None:
    HANDLES.close_all()
    first = shardkit.open_dataset(dataset_dir, decode=None)
    with shardkit.open_dataset(dataset_dir, decode=None) as second:
        expected = [second[i] for i in range(0, 120, 7)]
        assert [first[i] for i in range(0, 120, 7)] == expected
        shared = len(HANDLES)
        assert shared == 8
    assert len(HANDLES) == shared and len(second._handles) == 0   # first still holds every file
    assert [first[i] for i in range(0, 120, 7)] == expected
    first.close()
    assert len(HANDLES) == 0
    assert [first[i] for i in range(0, 120, 7)] == expected        # reading after close reopens
    first.close()
    assert len(HANDLES) == 0
