"""A dataset's ShardCache (read/cache.py): the one owner of its open shards in a process. Reads equal
what was written, whether rows come from the row arena, a shard's own mapped rows or a reader; at
most max_open_shards shard files are open at any instant, batches included; the least recently used
shard goes first; close() lets go of everything."""
from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch.utils.data

import shardkit

from ..conftest import shard_files_held
from ..faults.helpers import make_tiny_tree
from .conftest import PER_SHARD, ROWS, row_value

SHARDS = ROWS // PER_SHARD


def _expected() -> List[Any]:
    return [(np.array(row_value(i), np.float32), i % 3) for i in range(ROWS)]


def test_rows_read_twice_equal_what_was_written_and_sit_in_the_arena(rows_dataset: Path) -> None:
    """The first read of a shard opens it (located rows, no reader), the second indexes its rows."""
    expected = _expected()
    with shardkit.open_dataset(rows_dataset, decode=None) as raw, shardkit.open_dataset(rows_dataset) as decoded:
        for _ in range(2):
            for i in np.random.default_rng(0).permutation(ROWS).tolist():
                row, label = raw[i]
                assert np.array_equal(row, expected[i][0]) and label == expected[i][1]
                assert not row.flags.writeable
                assert torch.equal(decoded[i][0], torch.from_numpy(expected[i][0]))
        info = raw.shard_cache.info()
        assert info.placed == tuple(range(SHARDS)) and not info.readers and not info.open


def test_under_a_small_budget_rows_are_mapped_shard_by_shard_within_it(rows_dataset: Path) -> None:
    """Fewer shards open than the dataset holds: no arena, each shard's own rows mapped, never more
    than max_open_shards of them, and nothing left mapped once the views are gone."""
    expected = _expected()
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        for i in np.random.default_rng(1).permutation(ROWS).tolist():
            row, label = ds[i]
            assert np.array_equal(row, expected[i][0]) and label == expected[i][1]
            info = ds.shard_cache.info()
            assert not info.placed and len(info.open) <= 2 and set(info.mapped) == set(info.open)
            del row
            assert shard_files_held(rows_dataset) <= 2
    gc.collect()
    assert shard_files_held(rows_dataset) == 0


def test_open_shards_opens_the_first_shards_up_to_the_budget_and_no_more(rows_dataset: Path) -> None:
    """open_shards() under a budget smaller than the dataset opens its first max_open_shards shards
    (their rows mapped, no reader) and touches no other: rather than opening every shard in turn,
    each setting aside an earlier one."""
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        assert ds.open_shards() == 2
        info = ds.shard_cache.info()
        assert info.open == (0, 1) and info.mapped == (0, 1) and not info.readers and not info.placed
    with shardkit.open_dataset(rows_dataset, decode=None) as ds:
        assert ds.open_shards() == SHARDS and ds.shard_cache.info().placed == tuple(range(SHARDS))


def test_a_read_counts_as_recent_use(rows_dataset: Path) -> None:
    """Under a full budget the least recently read shard goes first, not the least recently opened."""
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        ds[0], ds[PER_SHARD], ds[1]             # shards 0, 1, then 0 again
        ds[2 * PER_SHARD]                       # shard 2 needs room: shard 1 goes
        assert ds.shard_cache.info().open == (0, 2)


def test_readers_of_encoded_images_stay_within_the_budget(images_dataset: Path) -> None:
    with shardkit.open_dataset(images_dataset, decode=None, max_open_shards=3) as ds, \
            shardkit.open_dataset(images_dataset, decode=None) as reference:
        expected = [bytes(memoryview(reference[i][0])) for i in range(len(reference))]
        for i in np.random.default_rng(2).permutation(len(ds)).tolist():
            assert bytes(memoryview(ds[i][0])) == expected[i]
            info = ds.shard_cache.info()
            assert len(info.readers) <= 3 and info.readers == tuple(sorted(info.open))
            assert shard_files_held(images_dataset) <= 3 + len(reference.shard_cache.info().open)


def test_close_lets_go_of_every_shard_and_reading_again_reopens(rows_dataset: Path) -> None:
    ds = shardkit.open_dataset(rows_dataset, decode=None)
    views = [ds[i][0] for i in range(ROWS)]
    ds.close()
    info = ds.shard_cache.info()
    assert not (info.open or info.placed or info.readers) and ds.shard_cache.table is None
    assert shard_files_held(rows_dataset) > 0           # the views still hold the arena
    assert all(np.array_equal(view, expected) for view, (expected, _) in zip(views, _expected()))
    del views
    gc.collect()
    assert shard_files_held(rows_dataset) == 0
    assert np.array_equal(ds[7][0], _expected()[7][0]) and ds.shard_cache.info().placed
    ds.close()


def test_threads_reading_under_a_small_budget_get_the_right_rows(rows_dataset: Path) -> None:
    """Four threads read in random orders while a budget of 2 sets shards aside under them."""
    expected = _expected()
    wrong: List[str] = []
    with shardkit.open_dataset(rows_dataset, decode=None, max_open_shards=2) as ds:
        def read(seed: int) -> None:
            for i in np.random.default_rng(seed).permutation(ROWS).tolist() * 3:
                row, label = ds[i]
                if not np.array_equal(row, expected[i][0]) or label != expected[i][1]:
                    wrong.append(f"{i}")
            batch = ds.__getitems__(list(range(ROWS)))
            wrong.extend(f"batch {i}" for i, (row, _) in enumerate(batch) if not np.array_equal(row, expected[i][0]))
        threads = [threading.Thread(target=read, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    assert not wrong


class _HeldAfterRead:
    """collate_fn: the batch's payloads as bytes, and the shard files the worker held with the whole
    batch in hand."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, batch: List[Any]) -> Any:
        held = shard_files_held(self.root)
        return [bytes(memoryview(np.ascontiguousarray(payload))) for payload, _ in batch], held


@pytest.mark.parametrize("kind", ["images", "rows"])
def test_a_workers_batches_never_hold_more_shard_files_than_its_budget(tmp_path: Path, fmt: str, kind: str) -> None:
    """300 shards of one sample each, batches of 64, a budget of 16: each batch touches 64 shards,
    and with the whole batch in hand (rows are zero-copy views, which pin their shard's map) a
    worker holds at most 16 shard files, as descriptors or maps."""
    dst = tmp_path / "dst"
    if kind == "images":
        make_tiny_tree(tmp_path / "src", 300, seed=4)
        shardkit.convert(str(tmp_path / "src"), str(dst), format=fmt, samples_per_shard=1, quiet=True)
    else:
        (tmp_path / "rows.csv").write_text("a,b,label\n" + "".join(f"{i},{-i},c{i % 2}\n" for i in range(300)))
        shardkit.convert(str(tmp_path / "rows.csv"), str(dst), format=fmt, label_column="label", samples_per_shard=1,
                         quiet=True)
    with shardkit.open_dataset(dst, decode=None) as reference:
        expected = sorted(bytes(memoryview(np.ascontiguousarray(reference[i][0]))) for i in range(len(reference)))
    with shardkit.open_dataset(dst, decode=None, max_open_shards=16) as ds:
        loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=2, collate_fn=_HeldAfterRead(dst),
                                             sampler=torch.utils.data.RandomSampler(ds))
        batches = list(loader)
    assert sorted(payload for payloads, _ in batches for payload in payloads) == expected
    held = [count for _, count in batches]
    assert max(held) <= 16 and max(held) >= 8, held
