"""ds[i] takes Python ints, numpy integers and 0-d integer tensors in every format; nothing else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import shardkit


@pytest.fixture
def ds(dataset_dir):
    """The shared test dataset, read as stored bytes."""
    return shardkit.open_dataset(dataset_dir, decode=None)


def _same(a, b) -> bool:
    return bytes(a[0]) == bytes(b[0]) and a[1] == b[1]


def test_integer_types_read_the_same_sample(ds) -> None:
    want = ds[5]
    for index in (np.int64(5), np.int32(5), np.uint8(5), torch.tensor(5), torch.tensor(5, dtype=torch.int32),
                  np.array(5)):
        assert _same(ds[index], want), type(index)


def test_negative_indices_follow_python(ds) -> None:
    n = len(ds)
    assert _same(ds[-1], ds[n - 1])
    assert _same(ds[np.int64(-n)], ds[0])
    with pytest.raises(IndexError, match=f"index {-n - 1} out of range"):
        ds[-n - 1]
    with pytest.raises(IndexError, match=f"index {n} out of range"):
        ds[n]


@pytest.mark.parametrize("index", [1.0, np.float32(1), torch.tensor(1.0), torch.tensor([1]), np.array([1]),
                                   True, np.bool_(True), torch.tensor(True), "1", None])
def test_other_index_types_are_type_errors(ds, index) -> None:
    with pytest.raises(TypeError, match="sample index must be an integer"):
        ds[index]


def test_dataloader_with_numpy_permutation_sampler(ds) -> None:
    order = np.random.default_rng(0).permutation(len(ds))
    loader = torch.utils.data.DataLoader(ds, sampler=order, batch_size=None, collate_fn=lambda x: x)
    labels = [label for _, label in loader]
    assert labels == [ds[int(i)][1] for i in order]
