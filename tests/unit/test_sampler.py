"""ShardAwareSampler laws: a permutation per epoch, disjoint equal rank splits, windows, determinism, resume."""
from __future__ import annotations

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit import ShardAwareSampler
from shardkit.read.splits import shard_ids


class FakeShards(torch.utils.data.Dataset):
    """A dataset with shardkit's shard layout and no files: item i is i."""

    def __init__(self, counts) -> None:
        self.shard_starts = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self.shard_starts[1:])

    def __len__(self) -> int:
        return int(self.shard_starts[-1])

    def __getitem__(self, index: int) -> int:
        return index


shard_counts = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=30)
windows = st.one_of(st.none(), st.integers(1, 6))


@settings(max_examples=60, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 2**31), epoch=st.integers(0, 50), window=windows)
def test_single_replica_is_a_permutation(counts, seed, epoch, window) -> None:
    sampler = ShardAwareSampler(FakeShards(counts), seed=seed, shards_per_window=window, num_replicas=1, rank=0)
    sampler.set_epoch(epoch)
    order = list(sampler)
    assert sorted(order) == list(range(sum(counts)))
    assert order == list(sampler)  # deterministic for (seed, epoch)


@settings(max_examples=60, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 1000), replicas=st.integers(1, 5), drop_last=st.booleans(),
       window=windows)
def test_ranks_split_equally_and_cover_everything(counts, seed, replicas, drop_last, window) -> None:
    total = sum(counts)
    parts = []
    for rank in range(replicas):
        sampler = ShardAwareSampler(FakeShards(counts), seed=seed, num_replicas=replicas, rank=rank,
                                    drop_last=drop_last, shards_per_window=window)
        parts.append(list(sampler))
        assert len(parts[-1]) == len(sampler)
    assert len({len(part) for part in parts}) == 1
    flat = [index for part in parts for index in part]
    if drop_last:
        assert len(set(flat)) == len(flat) == total // replicas * replicas
    else:
        assert set(flat) == set(range(total))
        assert len(flat) - total < replicas
        assert len(set(flat[:total])) == total     # padding only repeats, after every index once


@settings(max_examples=40, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 1000), replicas=st.integers(1, 4), data=st.data(), window=windows)
def test_subsets_and_concat_split_like_any_dataset(counts, seed, replicas, data, window) -> None:
    base = FakeShards(counts)
    picked = data.draw(st.lists(st.integers(0, max(0, len(base) - 1)), unique=True)) if len(base) else []
    combined = torch.utils.data.ConcatDataset([torch.utils.data.Subset(base, picked), FakeShards([3, 5])])
    indices = []
    for rank in range(replicas):
        sampler = ShardAwareSampler(combined, seed=seed, num_replicas=replicas, rank=rank, drop_last=True,
                                    shards_per_window=window)
        indices.extend(sampler)
    assert len(set(indices)) == len(indices) == len(combined) // replicas * replicas
    assert all(0 <= index < len(combined) for index in indices)


def test_shard_ids_follow_subset_and_concat() -> None:
    base = FakeShards([2, 3])
    assert shard_ids(base).tolist() == [0, 0, 1, 1, 1]
    sub = torch.utils.data.Subset(base, [4, 0])
    assert shard_ids(sub).tolist() == [1, 0]
    assert shard_ids(torch.utils.data.ConcatDataset([sub, base])).tolist() == [1, 0, 2, 2, 3, 3, 3]
    assert shard_ids(list(range(3))).tolist() == [0, 1, 2]


def test_windows_stay_within_their_shards() -> None:
    counts = [100] * 40
    sampler = ShardAwareSampler(FakeShards(counts), seed=3, shards_per_window=4, num_replicas=1, rank=0)
    shards = np.array(list(sampler)) // 100
    for start in range(0, len(shards), 400):
        assert len(set(shards[start:start + 400].tolist())) == 4


def test_default_is_not_windowed() -> None:
    sampler = ShardAwareSampler(FakeShards([100] * 40), seed=3, num_replicas=1, rank=0)
    shards = np.array(list(sampler)) // 100
    assert len(set(shards[:400].tolist())) > 30


def test_epochs_differ_and_unshuffled_is_identity() -> None:
    sampler = ShardAwareSampler(FakeShards([10, 10, 10]), seed=0, num_replicas=1, rank=0)
    first = list(sampler)
    sampler.set_epoch(1)
    assert list(sampler) != first
    plain = ShardAwareSampler(FakeShards([10, 10, 10]), shuffle=False, num_replicas=1, rank=0)
    assert list(plain) == list(range(30))


def test_is_a_distributed_sampler_without_a_process_group() -> None:
    sampler = ShardAwareSampler(FakeShards([10]), num_replicas=2, rank=1)
    assert isinstance(sampler, torch.utils.data.distributed.DistributedSampler)
    assert not torch.distributed.is_initialized()
    assert sampler.num_replicas == 2 and sampler.rank == 1 and len(sampler) == 5 and sampler.total_size == 10


@settings(max_examples=40, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 1000), epoch=st.integers(0, 5), replicas=st.integers(1, 3),
       window=windows, data=st.data())
def test_state_dict_resumes_where_the_epoch_stopped(counts, seed, epoch, replicas, window, data) -> None:
    rank = data.draw(st.integers(0, replicas - 1))

    def make():
        sampler = ShardAwareSampler(FakeShards(counts), seed=seed, num_replicas=replicas, rank=rank,
                                    shards_per_window=window)
        sampler.set_epoch(epoch)
        return sampler

    full = list(make())
    stop = data.draw(st.integers(0, len(full)))
    first = make()
    iterator = iter(first)
    head = [next(iterator) for _ in range(stop)]
    state = first.state_dict()
    again = make()
    again.load_state_dict(state)
    again.set_epoch(epoch)          # a training loop calls it again; the same epoch keeps the position
    assert head + list(again) == full
    assert list(again) == full      # the next iteration is a whole epoch again


def test_state_of_another_run_is_refused() -> None:
    state = ShardAwareSampler(FakeShards([10]), seed=1, num_replicas=1, rank=0).state_dict()
    with pytest.raises(shardkit.UsageError, match="resume with the same"):
        ShardAwareSampler(FakeShards([10]), seed=2, num_replicas=1, rank=0).load_state_dict(state)


def test_set_epoch_to_another_epoch_drops_the_resume_position() -> None:
    sampler = ShardAwareSampler(FakeShards([10]), seed=1, num_replicas=1, rank=0)
    iterator = iter(sampler)
    next(iterator)
    state = sampler.state_dict()
    other = ShardAwareSampler(FakeShards([10]), seed=1, num_replicas=1, rank=0)
    other.load_state_dict(state)
    other.set_epoch(1)
    assert len(list(other)) == 10
