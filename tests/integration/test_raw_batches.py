"""collate_raw / RawBatch: a batch of stored bytes leaves a worker as one buffer and holds exactly
what ds[i] returns, in the order asked, for every format, with and without worker processes."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, List, Tuple

import numpy as np
import pytest
import torch
import torch.multiprocessing
import torch.utils.data

import shardkit
from shardkit.errors import CorruptSampleError


def _expected(ds: Any, order: List[int]) -> List[Tuple[bytes, int, str]]:
    return [(bytes(memoryview(payload)), label, key) for payload, label, key in (ds[i] for i in order)]


def _unpacked(batches: List[shardkit.RawBatch]) -> List[Tuple[bytes, int, str]]:
    out = []
    for batch in batches:
        assert batch.labels is not None and batch.keys is not None
        out.extend(zip((bytes(view.numpy()) for view in batch.tensors()), batch.labels.tolist(), batch.keys))
    return out


def _in_worker_buffer(tensor: torch.Tensor) -> bool:
    """Whether the tensor's memory is a map of a worker's shared-memory file (a shardkit-batch memfd)."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, *_, name = line.split(maxsplit=5)
            start, end = (int(part, 16) for part in span.split("-"))
            if start <= address < end:
                return "memfd:shardkit-batch" in name
    return False


@pytest.mark.parametrize("workers", [0, 2])
def test_one_buffer_batches_hold_what_ds_i_returns(dataset_dir: Path, workers: int) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None, return_key=True) as ds:
        order = np.random.default_rng(3).permutation(len(ds)).tolist()[:45] + [0, 0, len(ds) - 1]
        loader = torch.utils.data.DataLoader(ds, batch_size=7, sampler=order, num_workers=workers,
                                             collate_fn=shardkit.collate_raw)
        batches = list(loader)
        assert [len(batch) for batch in batches] == [7] * 6 + [6]
        assert _unpacked(batches) == _expected(ds, order)
        for batch in batches:
            one = batch.data.untyped_storage().data_ptr()      # payloads, offsets, labels: one storage
            assert batch.offsets.untyped_storage().data_ptr() == one == batch.labels.untyped_storage().data_ptr()
            assert _in_worker_buffer(batch.data) == (workers > 0)    # workers hand over shared memory
            assert [bytes(batch[i].numpy()) for i in range(-len(batch), 0)] == \
                [bytes(view.numpy()) for view in batch.tensors()]
            assert int(batch.offsets[-1]) == batch.data.numel()


def test_a_subset_through_a_sampler(dataset_dir: Path) -> None:
    with shardkit.open_dataset(dataset_dir, decode=None, return_key=True) as ds:
        subset = torch.utils.data.Subset(ds, list(range(len(ds) - 1, 0, -3)))
        sampler = torch.utils.data.RandomSampler(subset, generator=torch.Generator().manual_seed(0))
        order = list(sampler)
        loader = torch.utils.data.DataLoader(subset, batch_size=10, sampler=order, collate_fn=shardkit.collate_raw)
        assert _unpacked(list(loader)) == _expected(ds, [subset.indices[i] for i in order])


def test_a_concat_dataset_without_getitems(dataset_dir: Path) -> None:
    """ConcatDataset has no __getitems__: the DataLoader reads ds[i] per sample, collate_raw packs them."""
    with shardkit.open_dataset(dataset_dir, decode=None, return_key=True) as ds:
        both = torch.utils.data.ConcatDataset([ds, ds])
        order = [len(ds) + 3, 2, 2 * len(ds) - 1, 0]
        loader = torch.utils.data.DataLoader(both, batch_size=3, sampler=order, collate_fn=shardkit.collate_raw)
        assert _unpacked(list(loader)) == _expected(ds, [index % len(ds) for index in order])


def test_a_corrupt_sample_is_named_from_a_worker(dataset_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(dataset_dir, copy)
    with shardkit.open_dataset(copy, decode=None) as ds:
        index = 21
        payload = bytes(memoryview(ds[index][0]))
        shard, local = ds.locate(index)
    path = copy / ds.manifest.shards[shard].path
    content = bytearray(path.read_bytes())
    where = content.find(payload)
    assert where > 0
    content[where + len(payload) // 2] ^= 0x10          # one bit of the payload, the CRC32 left as it was
    path.write_bytes(bytes(content))
    with shardkit.open_dataset(copy, decode=None, verify_checksums=True) as ds:
        in_process = torch.utils.data.DataLoader(ds, batch_size=8, sampler=list(range(16, 32)),
                                                 collate_fn=shardkit.collate_raw)
        with pytest.raises(CorruptSampleError) as caught:
            list(in_process)
        assert (caught.value.shard, caught.value.index, caught.value.global_index) == \
            (ds.manifest.shards[shard].path, local, index)
        workers = iter(torch.utils.data.DataLoader(ds, batch_size=8, sampler=list(range(16, 32)), num_workers=2,
                                                   collate_fn=shardkit.collate_raw))
        # torch rebuilds a worker's error from its text: the same class, naming the file, sample and problem
        with pytest.raises(CorruptSampleError, match="in DataLoader worker process") as caught_there:
            list(workers)
        workers._shutdown_workers()
        assert f"{path}: sample {local} (global index {index}): fails its CRC32 check" in str(caught_there.value)


@pytest.mark.parametrize("strategy", ["file_descriptor", "file_system"])
def test_a_worker_packs_batches_larger_than_one_write_call(strategy: str) -> None:
    """A worker writes the buffer with pwritev, at most 1024 pieces a call: 2500 samples take
    three; torch's other sharing strategy (by file name) carries it too."""
    samples = [(bytes([i % 251]) * (i % 7), i) for i in range(2500)]
    loader = torch.utils.data.DataLoader(samples, batch_size=2500, num_workers=1, collate_fn=shardkit.collate_raw)
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy(strategy)
    try:
        (batch,) = list(loader)
    finally:
        torch.multiprocessing.set_sharing_strategy(before)
    assert _in_worker_buffer(batch.data)
    assert [(bytes(view.numpy()), label) for view, label in zip(batch.tensors(), batch.labels.tolist())] == samples


def test_collate_raw_takes_every_sample_shape() -> None:
    bare = shardkit.collate_raw([b"ab", memoryview(b""), np.frombuffer(b"xyz", dtype=np.uint8)])
    assert (bare.labels, bare.keys, bare.offsets.tolist()) == (None, None, [0, 2, 2, 5])
    keyed = shardkit.collate_raw([(b"ab", "a.jpg"), (torch.tensor([1, 2], dtype=torch.uint8), "b.jpg")])
    assert (keyed.labels, keyed.keys, bytes(keyed[1].numpy())) == (None, ["a.jpg", "b.jpg"], b"\x01\x02")
    labeled = shardkit.collate_raw([(b"ab", np.int64(3)), (bytearray(b"c"), torch.tensor(-1))])
    assert (labeled.labels.tolist(), labeled.keys, bytes(labeled.data.numpy())) == ([3, -1], None, b"abc")
    assert [bytes(t.numpy()) for t in labeled.tensors()] == [b"ab", b"c"]
    with pytest.raises(IndexError):
        labeled[2]


@pytest.mark.parametrize("batch, problem", [
    ([], "empty"),
    ([(object(), 1)], "decode=None"),
    ([(b"a", 1.0)], "not an integer"),
    ([(b"a", 1), (b"b", 2, "k")], "sample 1"),
    ([(b"a", 1), b"b"], "sample 1"),
    ([(b"a", 1, 2, 3)], "tuple of 4"),
])
def test_collate_raw_refuses_what_it_cannot_pack(batch: List[Any], problem: str) -> None:
    with pytest.raises((TypeError, ValueError), match=problem):
        shardkit.collate_raw(batch)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="page-locked memory needs an accelerator")
def test_pin_memory_keeps_the_batch() -> None:
    batch = shardkit.collate_raw([(b"ab", 1, "a"), (b"cde", 2, "b")])
    pinned = batch.pin_memory()
    assert pinned.data.is_pinned() and pinned.offsets.is_pinned()
    assert ([bytes(t.numpy()) for t in pinned.tensors()], pinned.labels.tolist(), pinned.keys) == \
        ([b"ab", b"cde"], [1, 2], ["a", "b"])
