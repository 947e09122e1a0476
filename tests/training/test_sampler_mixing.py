"""The default ShardAwareSampler mixes like a uniform permutation, even on a class-sorted dataset,
while each DataLoader worker stays within max_open_shards handles."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch.utils.data

import shardkit

from ..conftest import shard_files_held

CLASSES, PER_CLASS, BATCH = 1000, 20, 256


def distinct_per_batch(labels: np.ndarray, order: np.ndarray, batch: int = BATCH) -> float:
    """Mean number of distinct labels in the full batches of order."""
    full = len(order) // batch * batch
    batches = labels[order[:full]].reshape(-1, batch)
    return float(np.mean([len(np.unique(row)) for row in batches]))


@pytest.fixture(scope="module")
def class_sorted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1,000 classes x 20 rows, written in class order (--order source), 40 rows per shard: 500 shards."""
    root = tmp_path_factory.mktemp("sorted")
    src = root / "rows.csv"
    src.write_text("x,label\n" + "".join(f"{i},c{i // PER_CLASS:04d}\n" for i in range(CLASSES * PER_CLASS)))
    shardkit.convert(str(src), str(root / "ds"), format="pt", label_column="label", samples_per_shard=40,
                     order="source", quiet=True)
    return root / "ds"


def test_default_order_mixes_like_a_uniform_permutation(class_sorted: Path) -> None:
    ds = shardkit.open_dataset(class_sorted)
    labels = ds.targets()
    assert len(ds.classes) == CLASSES and len(ds.manifest.shards) == 500
    assert np.all(np.diff(labels) >= 0)                       # the stored order is class-sorted
    rng = np.random.default_rng(0)
    uniform = np.mean([distinct_per_batch(labels, rng.permutation(len(ds))) for _ in range(3)])
    for epoch in range(3):
        sampler = shardkit.ShardAwareSampler(ds, seed=0, num_replicas=1, rank=0)
        sampler.set_epoch(epoch)
        mixed = distinct_per_batch(labels, np.fromiter(sampler, dtype=np.int64))
        assert mixed >= 0.95 * uniform, (mixed, uniform)
    windowed = shardkit.ShardAwareSampler(ds, seed=0, num_replicas=1, rank=0, shards_per_window=4)
    assert distinct_per_batch(labels, np.fromiter(windowed, dtype=np.int64)) < 0.2 * uniform


def test_subset_and_concat_mix_too(class_sorted: Path) -> None:
    ds = shardkit.open_dataset(class_sorted)
    train, val = shardkit.random_split(ds, [0.9, 0.1], seed=0)
    both = torch.utils.data.ConcatDataset([train, val])
    labels = np.concatenate([ds.targets()[train.indices], ds.targets()[val.indices]])
    sampler = shardkit.ShardAwareSampler(both, seed=0, num_replicas=1, rank=0)
    uniform = distinct_per_batch(labels, np.random.default_rng(1).permutation(len(both)))
    assert distinct_per_batch(labels, np.fromiter(sampler, dtype=np.int64)) >= 0.95 * uniform


class _OpenShards:
    """Transform: how many shard files of the dataset the worker reading this sample holds open."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def __call__(self, sample: object) -> int:
        return shard_files_held(self.root)


def test_workers_stay_within_max_open_shards(dataset_dir: Path) -> None:
    ds = shardkit.open_dataset(dataset_dir, decode=None, transform=_OpenShards(dataset_dir), max_open_shards=3)
    assert len(ds.manifest.shards) > 3
    sampler = shardkit.ShardAwareSampler(ds, seed=0, num_replicas=1, rank=0)
    loader = torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=16, num_workers=2)
    held = [int(count) for counts, _ in loader for count in counts]
    assert len(held) == len(ds) and max(held) <= 3 and max(held) >= 2
