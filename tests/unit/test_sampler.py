"""ShardAwareSampler laws: a permutation per epoch, disjoint equal rank splits, locality, determinism."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardkit import ShardAwareSampler


def fake_dataset(counts):
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return SimpleNamespace(shard_starts=starts)


shard_counts = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=30)


@settings(max_examples=60, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 2**31), epoch=st.integers(0, 50), window=st.integers(1, 6))
def test_single_replica_is_a_permutation(counts, seed, epoch, window) -> None:
    sampler = ShardAwareSampler(fake_dataset(counts), seed=seed, window_shards=window, num_replicas=1, rank=0)
    sampler.set_epoch(epoch)
    order = list(sampler)
    assert sorted(order) == list(range(sum(counts)))
    assert order == list(sampler)  # deterministic for (seed, epoch)


@settings(max_examples=60, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 1000), replicas=st.integers(1, 5), drop_last=st.booleans())
def test_ranks_split_equally_and_cover_everything(counts, seed, replicas, drop_last) -> None:
    total = sum(counts)
    parts = []
    for rank in range(replicas):
        sampler = ShardAwareSampler(fake_dataset(counts), seed=seed, num_replicas=replicas, rank=rank,
                                    drop_last=drop_last)
        parts.append(list(sampler))
        assert len(parts[-1]) == len(sampler)
    assert len({len(part) for part in parts}) == 1
    flat = [index for part in parts for index in part]
    if drop_last:
        assert len(set(flat)) == len(flat) == total // replicas * replicas
    else:
        assert set(flat) == set(range(total))
        assert len(flat) - total < replicas


def test_reads_stay_within_a_window_of_shards() -> None:
    counts = [100] * 40
    sampler = ShardAwareSampler(fake_dataset(counts), seed=3, window_shards=4, num_replicas=1, rank=0)
    order = np.array(list(sampler))
    shards = order // 100
    for start in range(0, len(order), 400):
        assert len(set(shards[start:start + 400].tolist())) <= 4


def test_epochs_differ_and_unshuffled_is_identity() -> None:
    sampler = ShardAwareSampler(fake_dataset([10, 10, 10]), seed=0, num_replicas=1, rank=0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first
    plain = ShardAwareSampler(fake_dataset([10, 10, 10]), shuffle=False, num_replicas=1, rank=0)
    assert list(plain) == list(range(30))
