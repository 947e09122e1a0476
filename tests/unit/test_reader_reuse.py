"""The dataset reuses the shard readers it got only while HANDLES has closed nothing and the process is the same."""
from __future__ import annotations

import multiprocessing
from pathlib import Path

import shardkit
from shardkit.handles import HANDLES


def test_reader_is_reopened_after_handles_close(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    first = ds[0]
    reader = ds.reader(0)
    assert ds.reader(0) is reader
    HANDLES.close_all()
    assert ds.reader(0) is not reader
    assert ds[0] == first
    HANDLES.close_all()


def test_eviction_by_another_dataset_is_noticed(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None, max_open_shards=1)
    other = shardkit.open_dataset(dataset_dir, decode=None, max_open_shards=1)
    expected = [ds[i] for i in (0, 20, 40)]
    reader = ds.reader(0)
    other.reader(2)                         # evicts and closes shard 0's reader
    assert ds.reader(0) is not reader
    assert [ds[i] for i in (0, 20, 40)] == expected
    assert [other[i] for i in (0, 20, 40)] == expected
    HANDLES.close_all()


def _child_check(ds: shardkit.ShardDataset, parent_reader: object, expected: object) -> None:
    ok = ds.reader(0) is not parent_reader and ds[0] == expected
    raise SystemExit(0 if ok else 3)


def test_forked_child_opens_its_own_reader(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None)
    expected = ds[0]
    child = multiprocessing.get_context("fork").Process(target=_child_check, args=(ds, ds.reader(0), expected))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    HANDLES.close_all()
