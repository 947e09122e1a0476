"""Real DataLoader worker processes (fork and spawn), persistent workers, two epochs."""
from __future__ import annotations

import zlib
from collections import Counter
from pathlib import Path

import pytest
import torch.utils.data

import shardkit

from ..conftest import image_files


def payload_crc(payload) -> int:
    """Module-level (picklable under spawn) transform: CRC32 of the stored bytes."""
    return zlib.crc32(memoryview(payload))


def collate_pairs(batch):
    return batch


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_two_epochs_two_workers_every_index_once(dataset_dir: Path, image_tree: Path, start_method: str) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None, transform=payload_crc, verify_checksums=True)
    ds[0]  # the parent holds open handles before the workers start: they must not be shared
    sampler = shardkit.ShardAwareSampler(ds, shuffle=True, seed=7)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=16, sampler=sampler, num_workers=2, persistent_workers=True,
        multiprocessing_context=start_method, worker_init_fn=shardkit.worker_init_fn, collate_fn=collate_pairs)
    expected = Counter(
        (zlib.crc32((image_tree / rel).read_bytes()), ds.classes.index(rel.split("/")[0]))
        for rel in image_files(image_tree))
    orders = []
    for epoch in range(2):
        sampler.set_epoch(epoch)
        seen = Counter()
        for batch in loader:
            seen.update(batch)
        assert seen == expected, f"epoch {epoch}"
        orders.append(list(sampler))
    assert orders[0] != orders[1]
    assert sorted(orders[0]) == list(range(len(ds)))


def test_without_worker_init_fn(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None, transform=payload_crc)
    direct = [ds[i][0] for i in range(len(ds))]
    loader = torch.utils.data.DataLoader(ds, batch_size=10, num_workers=2, collate_fn=collate_pairs)
    assert [crc for batch in loader for crc, _ in batch] == direct


def test_decoded_tensors_through_loader(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode="tensor")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2,
                                         worker_init_fn=shardkit.worker_init_fn)
    count = 0
    for tensor, label in loader:
        assert tensor.dtype == torch.uint8 and tensor.shape[0] == 3
        assert 0 <= int(label) < len(ds.classes)
        count += 1
    assert count == len(ds)
