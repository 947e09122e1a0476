"""__getitems__: a whole batch in the order asked, one backend pass per shard, same samples as ds[i]."""
from __future__ import annotations

from pathlib import Path
from typing import Any, List

import numpy as np
import pytest
import torch.utils.data

import shardkit
from shardkit.formats import SampleChecks, get_format
from shardkit.read.shards import MIN_GROUP


def _raw(sample: Any) -> Any:
    payload, label = sample
    return bytes(memoryview(payload)), label


def test_batch_matches_single_reads_in_order(dataset_dir: Path, image_tree: Path) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        order = np.random.default_rng(1).permutation(len(ds)).tolist()
        order += [order[0], -1, -len(ds), 17, 17]           # repeats and negative indices too
        batch = ds.__getitems__(order)
        assert [_raw(sample) for sample in batch] == [_raw(ds[index]) for index in order]
        assert [bytes(memoryview(p)) for p, _ in batch[:5]] == \
            [(image_tree / ds.key(i)).read_bytes() for i in order[:5]]
        assert ds.__getitems__([]) == []
        assert [_raw(s) for s in ds.__getitems__(np.array([3, 2], dtype=np.int32))] == [_raw(ds[3]), _raw(ds[2])]


def _recorded_batch(ds: Any, order: List[int], monkeypatch: pytest.MonkeyPatch) -> "tuple[list, list]":
    """(ds.__getitems__(order), the (shard, locals) of each backend call it made)."""
    calls: List[tuple] = []
    one, many = SampleChecks.read, SampleChecks.read_many

    def read(self: Any, reader: Any, shard: int, local: int, index: Any = None, table: Any = None) -> Any:
        calls.append((shard, [local]))
        return one(self, reader, shard, local, index, table)

    def read_many(self: Any, reader: Any, shard: int, locals_: Any, indices: Any) -> Any:
        calls.append((shard, list(locals_)))
        return many(self, reader, shard, locals_, indices)

    with monkeypatch.context() as patch:
        patch.setattr(SampleChecks, "read", read)
        patch.setattr(SampleChecks, "read_many", read_many)
        batch = ds.__getitems__(order)
    return batch, calls


def test_one_backend_pass_per_shard_for_large_groups(dataset_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MIN_GROUP (16) samples of a shard or more in a batch: one pass per shard."""
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        starts = ds.shard_starts
        second, first = (list(range(int(starts[k]), int(starts[k + 1]))) for k in (2, 0))
        assert len(second) == len(first) == MIN_GROUP
        order = [index for pair in zip(second[::-1], first) for index in pair]
        batch, calls = _recorded_batch(ds, order, monkeypatch)
        assert sorted(calls) == [(0, list(range(16))), (2, list(range(15, -1, -1)))]
        assert [_raw(sample) for sample in batch] == [_raw(ds[index]) for index in order]


def test_small_groups_are_read_sample_by_sample(dataset_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch meeting each shard a few times (uniform order over many shards) is read sample by
    sample, in order: grouping it would cost more than the one-pass reads save."""
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        starts = ds.shard_starts
        order = [int(starts[2]) + 1, int(starts[0]), int(starts[2]), int(starts[5]) + 3, int(starts[0]) + 4]
        batch, calls = _recorded_batch(ds, order, monkeypatch)
        assert calls == [(2, [1]), (0, [0]), (2, [0]), (5, [3]), (0, [4])]
        assert [_raw(sample) for sample in batch] == [_raw(ds[index]) for index in order]


def test_out_of_range_and_bad_types(dataset_dir: Path) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        with pytest.raises(IndexError, match=str(len(ds))):
            ds.__getitems__([0, len(ds)])
        with pytest.raises(IndexError):
            ds.__getitems__([-len(ds) - 1])
        with pytest.raises(IndexError, match=str(2 ** 70)):       # beyond int64, as ds[i] says
            ds.__getitems__([0, 2 ** 70])
        with pytest.raises(TypeError):
            ds.__getitems__([0.5])


def test_batch_takes_every_index_type_ds_i_takes(dataset_dir: Path) -> None:
    """Python and numpy integers, 0-d tensors, a 1-D integer array or tensor; bools and floats refused."""
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        expected = [_raw(ds[index]) for index in (5, 1, -2)]
        for batch in ([5, np.int64(1), torch.tensor(-2)], np.array([5, 1, -2], dtype=np.int16),
                      torch.tensor([5, 1, -2]), (np.int32(5), 1, -2)):
            assert [_raw(sample) for sample in ds.__getitems__(batch)] == expected
        for bad in ([True], np.array([1, 0], dtype=bool), torch.tensor([1.0]), [np.float64(1)], [torch.tensor([1])]):
            with pytest.raises(TypeError, match="integer"):
                ds.__getitems__(bad)
        with pytest.raises(IndexError, match=str(len(ds))):
            ds.__getitems__(torch.tensor([0, len(ds)]))


def test_batch_returns_keys_as_ds_i_does(dataset_dir: Path, image_tree: Path) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None, return_key=True) as ds:
        order = [7, 0, 7, len(ds) - 1, 3]
        batch = ds.__getitems__(order)
        assert [(bytes(memoryview(p)), label, key) for p, label, key in batch] == \
            [(bytes(memoryview(ds[i][0])), ds[i][1], ds.key(i)) for i in order]
        assert [bytes(memoryview(p)) for p, _, _ in batch] == [(image_tree / key).read_bytes() for _, _, key in batch]


def test_decode_and_transforms_run_per_sample(dataset_dir: Path) -> None:
    with shardkit.open_dataset(dataset_dir, transform=lambda image: image.size,
                               target_transform=lambda label: -label) as ds:
        order = [40, 3, 99, 3]
        assert ds.__getitems__(order) == [ds[index] for index in order]


def test_dataloader_uses_the_batched_path(dataset_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        expected = [_raw(ds[index]) for index in range(len(ds))]
        batches = []
        monkeypatch.setattr(type(ds), "__getitem__", None)              # only __getitems__ can serve it
        loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, collate_fn=lambda b: b,
                                             generator=torch.Generator().manual_seed(0))
        for batch in loader:
            batches.extend(batch)
        assert sorted(_raw(sample) for sample in batches) == sorted(expected)


def test_every_format_reader_batches(dataset_dir: Path, fmt: str) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None) as ds:
        reader = ds.shard_cache.reader(1)
        assert ds.manifest.format_name == get_format(fmt).name
        many = reader.read_many([4, 0, 4])
        singles = [reader.read(i) for i in (4, 0, 4)]
        assert [(bytes(memoryview(e.payload)), e.label, e.crc32) for e in many] == \
            [(bytes(memoryview(e.payload)), e.label, e.crc32) for e in singles]
        with pytest.raises(IndexError):
            reader.read_many([0, len(reader)])
