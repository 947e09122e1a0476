"""Elastic resume of ShardAwareSampler: an epoch stopped on N ranks continues on M ranks, every
sample not yet read is read exactly once (padding aside), and none read before is read again."""
from __future__ import annotations

from typing import List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit import ShardAwareSampler
from tests.unit.test_sampler import FakeShards

shard_counts = st.lists(st.integers(min_value=0, max_value=30), min_size=1, max_size=12)


def _read(counts, ranks: int, seed: int, epoch: int, drop_last: bool, stop: int, state=None):
    """What each of `ranks` samplers yields (the first `stop` each when stop >= 0), and rank 0's
    state after that."""
    reads: List[List[int]] = []
    states = []
    for rank in range(ranks):
        sampler = ShardAwareSampler(FakeShards(counts), seed=seed, num_replicas=ranks, rank=rank,
                                    drop_last=drop_last)
        if state is not None:
            sampler.load_state_dict(state)
        sampler.set_epoch(epoch)
        iterator = iter(sampler)
        taken = []
        for index in iterator:
            if len(taken) == stop:
                break
            taken.append(index)
        reads.append(taken)
        states.append(sampler.state_dict(consumed=None if stop < 0 else len(taken)))
    return reads, states


def _check_rest(before: List[int], after: List[List[int]], total: int, ranks: int, drop_last: bool) -> None:
    flat = [index for part in after for index in part]
    assert len({len(part) for part in after}) == 1                   # equal counts per new rank
    assert not set(flat) & set(before)                                # none read before is read again
    left = set(range(total)) - set(before)
    if drop_last:
        assert set(flat) <= left and len(left - set(flat)) < ranks and len(set(flat)) == len(flat)
    else:
        assert set(flat) == left                                      # every remaining sample...
        assert len(flat) - len(left) < ranks or not left              # ...once, but for the padding


@settings(max_examples=120, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 1000), epoch=st.integers(0, 3), old=st.integers(1, 5),
       new=st.integers(1, 5), drop_last=st.booleans(), data=st.data())
def test_an_epoch_continues_on_another_number_of_ranks(counts, seed, epoch, old, new, drop_last, data) -> None:
    total = sum(counts)
    per_rank = total // old if drop_last else -(-total // old)
    stop = data.draw(st.integers(0, per_rank))
    before, states = _read(counts, old, seed, epoch, drop_last, stop)
    assert all(state == {**states[0], "rank": state["rank"]} for state in states)   # lockstep: one state fits all
    after, _ = _read(counts, new, seed, epoch, drop_last, -1, state=states[0])
    if old == new:      # each rank continues its own block: the rest of the uninterrupted epoch, padding too
        whole, _ = _read(counts, old, seed, epoch, drop_last, -1)
        assert after == [part[stop:] for part in whole]
    else:
        _check_rest([index for part in before for index in part], after, total, new, drop_last)


@settings(max_examples=80, deadline=None)
@given(counts=shard_counts, seed=st.integers(0, 1000),
       ranks=st.lists(st.integers(1, 5), min_size=3, max_size=3, unique=True), data=st.data())
def test_two_restarts_in_one_epoch(counts, seed, ranks, data) -> None:
    """N -> M -> K: the second restart's state carries the first, so nothing read is read again."""
    total = sum(counts)
    first, second, third = ranks
    stop = data.draw(st.integers(0, -(-total // first)))
    read_one, states = _read(counts, first, seed, 0, False, stop)
    probe, _ = _read(counts, second, seed, 0, False, -1, state=states[0])
    stop_two = data.draw(st.integers(0, len(probe[0])))
    read_two, states = _read(counts, second, seed, 0, False, stop_two, state=states[0])
    after, _ = _read(counts, third, seed, 0, False, -1, state=states[0])
    before = [i for part in read_one + read_two for i in part]
    _check_rest(before, after, total, third, False)


def test_the_same_number_of_ranks_continues_each_block_where_it_stopped() -> None:
    """Saved and loaded with 3 ranks: each rank's rest is the tail of its own uninterrupted block
    (padding included), as before elastic resume existed."""
    whole, _ = _read([7, 7, 7], 3, 4, 1, False, -1)
    _, states = _read([7, 7, 7], 3, 4, 1, False, 2)
    for rank in range(3):
        sampler = ShardAwareSampler(FakeShards([7, 7, 7]), seed=4, num_replicas=3, rank=rank)
        sampler.load_state_dict(states[rank])
        sampler.set_epoch(1)
        assert list(sampler) == whole[rank][2:]


def test_after_the_resumed_epoch_the_next_is_whole() -> None:
    _, states = _read([10, 10], 2, 0, 0, False, 4)
    sampler = ShardAwareSampler(FakeShards([10, 10]), seed=0, num_replicas=3, rank=0)
    sampler.load_state_dict(states[0])
    assert len(list(sampler)) == 4          # (20 - 8) / 3
    assert len(list(sampler)) == 7          # the same epoch again, whole
    sampler.load_state_dict(states[0])
    sampler.set_epoch(1)
    assert len(list(sampler)) == 7          # another epoch drops the loaded position


@pytest.mark.parametrize("bad", [{"resumed": [[0, 1, False]]}, {"resumed": [["x", 1, False]]},
                                 {"yielded": -1}, {"yielded": 99}, {"num_replicas": 0}])
def test_a_malformed_state_is_refused(bad) -> None:
    _, states = _read([10, 10], 2, 0, 0, False, 4)
    sampler = ShardAwareSampler(FakeShards([10, 10]), seed=0, num_replicas=3, rank=0)
    with pytest.raises(shardkit.UsageError, match="sampler state"):
        sampler.load_state_dict({**states[0], **bad})


def test_a_loader_state_saved_with_other_workers_loads_into_the_sampler(tmp_path) -> None:
    """torchdata refuses its own state in a loader with another num_workers; the sampler takes it,
    on another number of ranks too (2 workers, 1 rank -> 0 workers, 2 ranks)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader(workers: int, ranks: int, rank: int) -> StatefulDataLoader:
        data = FakeShards([30, 30])
        sampler = ShardAwareSampler(data, seed=1, num_replicas=ranks, rank=rank)
        return StatefulDataLoader(data, batch_size=4, sampler=sampler, num_workers=workers, collate_fn=list)

    first = loader(2, 1, 0)
    head = []
    for number, batch in enumerate(first):
        head += batch
        if number == 4:
            break
    saved = first.state_dict()
    rest = []
    for rank in range(2):
        again = loader(0, 2, rank)
        again.sampler.load_state_dict(saved)
        rest += [index for batch in again for index in batch]
    assert len(head) == 20 and sorted(head + rest) == list(range(60))
