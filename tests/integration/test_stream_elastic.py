"""Elastic resume of ShardStream: an epoch stopped after k batches on N ranks x W workers continues
on M ranks x V workers (another batch size too): every sample not yet read is read once (padding
aside), none read before is read again; on the same ranks and workers it is the uninterrupted rest."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.samples import make_image_tree

TOTAL = 41


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """41 samples in 11 shards of 4, and in 2 shards."""
    root = tmp_path_factory.mktemp("elastic")
    make_image_tree(str(root / "src"), num_images=TOTAL, sizes=(8, 12), seed=6)
    made = {}
    for name, per_shard in (("many", 4), ("few", 25)):
        made[name] = root / name
        shardkit.convert(str(root / "src"), str(made[name]), samples_per_shard=per_shard, image_mode="raw",
                         size=(4, 4), quiet=True)
    return made


def _stream(root: Path, ranks: int, rank: int, batch: int, state=None, buffer: int = 5) -> shardkit.ShardStream:
    stream = shardkit.ShardStream(root, decode=None, num_replicas=ranks, rank=rank, seed=3, shuffle_buffer=buffer,
                                  batch_size=batch)
    if state is not None:
        stream.load_state_dict(state)
    stream.set_epoch(1)
    return stream


def _batches(stream: shardkit.ShardStream, workers: int) -> List[List[int]]:
    """The batches DataLoader(stream, num_workers=workers) yields, as global indices, computed from
    each reader's order without reading: one batch from each worker in turn, ended ones skipped."""
    sequences = []
    for worker in range(workers):
        indices, order, _ = stream.reader_order(worker, workers)
        sequences.append([int(indices[position]) for position in order])
    batches, turn = [], 0
    while any(sequences):
        if sequences[turn]:
            batches.append(sequences[turn][:stream.batch_size])
            sequences[turn] = sequences[turn][stream.batch_size:]
        turn = (turn + 1) % workers
    return batches


def _check_law(before: List[int], after: List[List[int]], ranks: int) -> None:
    flat = [index for part in after for index in part]
    assert len({len(part) for part in after}) == 1                 # equal counts per new rank
    assert not set(flat) & set(before)                              # nothing read before is read again
    assert set(flat) | set(before) == set(range(TOTAL))             # every remaining sample is read...
    assert len(flat) - len(set(flat)) < ranks                        # ...once, but for the padding


@settings(max_examples=40, deadline=None)
@given(old=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4)),
       new=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 4)), buffer=st.sampled_from([1, 5]),
       layout=st.sampled_from(["many", "few"]), data=st.data())
def test_the_rest_of_an_epoch_on_other_ranks_workers_and_batch_size(layouts, old, new, buffer, layout, data) -> None:
    (ranks, workers, batch), (new_ranks, new_workers, new_batch) = old, new
    whole = [_batches(_stream(layouts[layout], ranks, rank, batch, buffer=buffer), workers) for rank in range(ranks)]
    stop = data.draw(st.integers(0, len(whole[0])))
    assert len({len(batches) for batches in whole}) == 1            # ranks step in lockstep
    before = [index for batches in whole for batch in batches[:stop] for index in batch]
    state = _stream(layouts[layout], ranks, 0, batch, buffer=buffer).state_dict(stop, num_workers=workers)
    after = []
    for rank in range(new_ranks):
        stream = _stream(layouts[layout], new_ranks, rank, new_batch, state, buffer=buffer)
        after.append([index for batch in _batches(stream, new_workers) for index in batch])
    if old == new:
        assert after == [[index for batch in batches[stop:] for index in batch] for batches in whole]
    else:
        _check_law(before, after, new_ranks)


def test_two_restarts_carry_what_the_first_read(layouts) -> None:
    """2 ranks x 2 workers -> 3 ranks x 1 worker -> 1 rank x 2 workers, batch 2 then 3 then 4."""
    root = layouts["many"]
    first = [_batches(_stream(root, 2, rank, 2), 2) for rank in range(2)]
    read = [index for batches in first for batch in batches[:3] for index in batch]
    state = _stream(root, 2, 0, 2).state_dict(3, num_workers=2)
    second = [_batches(_stream(root, 3, rank, 3, state), 1) for rank in range(3)]
    read += [index for batches in second for batch in batches[:2] for index in batch]
    state = _stream(root, 3, 0, 3, state).state_dict(2, num_workers=1)
    last = [[index for batch in _batches(_stream(root, 1, 0, 4, state), 2) for index in batch]]
    _check_law(read, last, 1)


@pytest.mark.parametrize("old, new", [((2, 2), (3, 1)), ((1, 0), (2, 2))])
def test_real_dataloaders_read_the_rest_once(layouts, old, new) -> None:
    """The same law through torch's DataLoader and its worker processes (0 workers: one reader)."""
    root = layouts["many"]
    (ranks, workers), (new_ranks, new_workers) = old, new
    index = {}
    ds = shardkit.open_dataset(root, decode=None)
    for number in range(len(ds)):
        index[bytes(ds[number][0])] = number

    def loader(stream: shardkit.ShardStream, count: int) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(stream, batch_size=stream.batch_size, num_workers=count,
                                           collate_fn=lambda batch: [index[bytes(payload)] for payload, _ in batch])
    before = []
    for rank in range(ranks):
        for number, batch in enumerate(loader(_stream(root, ranks, rank, 2), workers)):
            if number == 4:
                break
            before += batch
    state = _stream(root, ranks, 0, 2).state_dict(4, num_workers=workers)
    after = [[i for batch in loader(_stream(root, new_ranks, rank, 2, state), new_workers) for i in batch]
             for rank in range(new_ranks)]
    _check_law(before, after, new_ranks)


def test_a_state_without_workers_resumes_only_where_it_was_saved(layouts) -> None:
    state = _stream(layouts["many"], 2, 0, 2).state_dict(3)
    again = _stream(layouts["many"], 2, 1, 2, state)
    assert len(list(iter(again))) == 21 - 6                            # the same ranks: fine
    other = _stream(layouts["many"], 3, 0, 2, state)
    with pytest.raises(shardkit.UsageError, match="num_workers"):
        list(iter(other))
    with pytest.raises(shardkit.UsageError, match="same dataset, seed"):
        _stream(layouts["many"], 2, 0, 2, state, buffer=7)
