"""MixedDataset: exact shares per epoch, passes without replacement, draws with replacement, seeds,
DDP ranks, elastic and StatefulDataLoader resume, and batches that record each sample's source."""
from __future__ import annotations

import collections
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.samples import make_image_tree

from ..conftest import assert_imports_no_numpy_module


class Numbers(torch.utils.data.Dataset):
    """Item i is (base + i, base): a source whose samples name themselves."""

    def __init__(self, length: int, base: int) -> None:
        self.length, self.base = length, base

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if not 0 <= index < self.length:
            raise IndexError(index)
        return self.base + index, self.base


def _sources(*lengths: int) -> List[Numbers]:
    return [Numbers(length, 1000 * number) for number, length in enumerate(lengths)]


def _epoch(mixed: shardkit.MixedDataset, epoch: int = 0) -> List[tuple]:
    mixed.sampler.set_epoch(epoch)
    return [mixed[index] for index in mixed.sampler]


def test_shares_are_exact_over_an_epoch_of_100000() -> None:
    mixed = shardkit.MixedDataset(_sources(5000, 300, 70000), weights=[0.5, 0.3, 0.2], num_samples=100_000)
    sources = collections.Counter(source for _, _, source in _epoch(mixed))
    assert [sources[number] for number in range(3)] == [50_000, 30_000, 20_000]
    small = shardkit.MixedDataset(_sources(10, 10, 10), weights=[1, 1, 1], num_samples=100)
    assert sorted(small.counts.tolist()) == [33, 33, 34] and len(list(small.sampler)) == small.num_samples == 100


def test_without_replacement_a_source_is_read_in_passes_across_epochs() -> None:
    """A source read at 40 of 100 per epoch repeats nothing within an epoch, and every sample
    comes once before any comes twice (epochs 0-2 cover 120 draws: all 100, then 20 of a new pass);
    one read at 25 of 10 per epoch serves each sample 2 or 3 times."""
    mixed = shardkit.MixedDataset(_sources(100, 10), weights=[40, 25], num_samples=65)
    seen: List[int] = []
    for epoch in range(3):
        values = [value for value, _, source in _epoch(mixed, epoch) if source == 0]
        assert len(values) == len(set(values)) == 40
        seen += values
    assert set(seen[:100]) == set(range(100))
    counts = collections.Counter(value for value, _, source in _epoch(mixed, 0) if source == 1)
    assert sorted(set(counts.values())) == [2, 3] and sum(counts.values()) == 25


@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, 60), share=st.floats(0.01, 0.4), seed=st.integers(0, 99), epochs=st.integers(1, 12))
def test_passes_cover_the_source_and_no_epoch_repeats_a_sample(length, share, seed, epochs) -> None:
    """Taking at most 2/5 of a source per epoch: no epoch reads a sample twice, and the stream of
    draws is a run of whole passes (each sample once per pass)."""
    count = max(1, int(length * share))
    mixed = shardkit.MixedDataset(_sources(length, 5), weights=[count, 1], num_samples=count + 1, seed=seed)
    assert mixed.counts[0] == count
    stream: List[int] = []
    for epoch in range(epochs):
        draws = mixed.sampler.draws(0, epoch).tolist()
        assert len(draws) == len(set(draws)) == count
        stream += draws
    for start in range(0, len(stream) - length + 1, length):
        assert sorted(stream[start:start + length]) == list(range(length))


def test_with_replacement_draws_repeat_and_cover_the_source() -> None:
    mixed = shardkit.MixedDataset(_sources(50, 50), weights=[1, 1], num_samples=4000, replacement=[True, False])
    counts = collections.Counter(value for value, _, source in _epoch(mixed) if source == 0)
    assert set(counts) == set(range(50)) and max(counts.values()) > 40 + 10      # 40 each on average
    passes = collections.Counter(value for value, _, source in _epoch(mixed) if source == 1)
    assert set(passes.values()) == {40}                                            # 40 whole passes


def test_epoch_source_ends_the_epoch_once_that_source_is_read_whole() -> None:
    mixed = shardkit.MixedDataset(_sources(100, 1000), weights=[0.25, 0.75], epoch_source=0)
    assert mixed.counts.tolist() == [100, 300]
    values = sorted(value for value, _, source in _epoch(mixed) if source == 0)
    assert values == list(range(100))


def test_the_order_is_a_function_of_the_seed_and_epoch() -> None:
    def order(seed: int, epoch: int) -> List[tuple]:
        return _epoch(shardkit.MixedDataset(_sources(30, 40), weights=[2, 1], seed=seed), epoch)
    assert order(3, 1) == order(3, 1)
    assert order(3, 1) != order(3, 2) and order(3, 1) != order(4, 1)


def test_ranks_split_the_epoch() -> None:
    parts = []
    for rank in range(3):
        mixed = shardkit.MixedDataset(_sources(30, 31), weights=[1, 1], num_samples=60, num_replicas=3, rank=rank)
        parts.append(list(mixed.sampler))
    whole = shardkit.MixedDataset(_sources(30, 31), weights=[1, 1], num_samples=60)
    assert [len(part) for part in parts] == [20, 20, 20]
    assert sorted(index for part in parts for index in part) == sorted(whole.sampler)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=3), size=st.integers(0, 80),
       old=st.integers(1, 4), new=st.integers(1, 4), replacement=st.booleans(), data=st.data())
def test_elastic_resume_reads_the_rest_of_the_epoch(lengths, size, old, new, replacement, data) -> None:
    """Saved on `old` ranks after k samples each, loaded on `new`: what was read plus what is read
    after is the epoch's multiset of samples (repeats included), but for padding (< old + new)."""
    def mixed(ranks: int, rank: int) -> shardkit.MixedDataset:
        made = shardkit.MixedDataset(_sources(*lengths), weights=list(range(1, len(lengths) + 1)), seed=7,
                                     num_samples=size, replacement=replacement, num_replicas=ranks, rank=rank)
        made.sampler.set_epoch(2)
        return made
    stop = data.draw(st.integers(0, len(mixed(old, 0).sampler)))
    before, state = [], None
    for rank in range(old):
        sampler = mixed(old, rank).sampler
        iterator = iter(sampler)
        before += [next(iterator) for _ in range(stop)]
        state = sampler.state_dict()
    after = []
    for rank in range(new):
        sampler = mixed(new, rank).sampler
        sampler.load_state_dict(state)
        after += list(sampler)
    epoch = collections.Counter(mixed(1, 0).sampler)
    read = collections.Counter(before + after)
    assert not epoch - read                                 # every sample of the epoch read...
    assert sum((read - epoch).values()) < old + new         # ...and beyond it only padding


def test_misuse_is_refused_with_a_readable_line() -> None:
    mixed = shardkit.MixedDataset(_sources(3, 3))
    assert mixed[4] == (1001, 1000, 1) and mixed.locate(4) == (1, 1)          # the sources end to end
    with pytest.raises(shardkit.UsageError, match="sampler=mixed.sampler"):
        list(torch.utils.data.DataLoader(mixed, batch_size=2))                 # unweighted: refused
    with pytest.raises(IndexError):
        mixed[6]
    for bad in ({"weights": [1]}, {"weights": [1, -1]}, {"weights": [0, 0]}, {"weights": [1, float("nan")]},
                {"num_samples": 5, "epoch_source": 0}, {"epoch_source": 2}, {"replacement": [True]}):
        with pytest.raises(shardkit.UsageError):
            shardkit.MixedDataset(_sources(3, 3), **bad)
    with pytest.raises(shardkit.UsageError, match="source 1 is empty"):
        shardkit.MixedDataset(_sources(3, 0), weights=[1, 1])


# ---- real datasets through DataLoader -------------------------------------------------------
@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """A 4-class and a 2-class dataset of small raw images."""
    root = tmp_path_factory.mktemp("mixing")
    made = {}
    for name, classes, count in (("shapes", ("circle", "square", "stripes", "triangle"), 40), ("two", ("a", "b"), 24)):
        make_image_tree(str(root / f"{name}-src"), num_images=count, classes=classes, seed=len(name), sizes=(8, 12))
        made[name] = root / name
        shardkit.convert(str(root / f"{name}-src"), str(made[name]), image_mode="raw", size=(8, 8),
                         samples_per_shard=10, quiet=True)
    return made


def _sources_of(paths: Dict[str, Path]) -> list:
    return [shardkit.open_dataset(paths["shapes"], decode="tensor"),
            shardkit.open_dataset(paths["two"], decode="tensor", target_transform=lambda label: label + 100)]


def test_a_batch_records_each_samples_source_through_default_collate(two_datasets: Dict[str, Path]) -> None:
    sources = _sources_of(two_datasets)
    mixed = shardkit.MixedDataset(sources, weights=[0.5, 0.5], num_samples=64, seed=1)
    assert mixed.classes == [sources[0].classes, ["a", "b"]]
    loader = torch.utils.data.DataLoader(mixed, batch_size=16, sampler=mixed.sampler, num_workers=2)
    first = len(sources[0])         # the sources end to end: the second starts after the first
    order = [(0, index) if index < first else (1, index - first) for index in mixed.sampler]
    got = 0
    for images, labels, source in loader:
        assert images.shape == (len(source), 3, 8, 8) and source.dtype == torch.int64
        # one storage for labels and sources: the worker sent them through its pipe as one descriptor
        assert labels.untyped_storage().data_ptr() == source.untyped_storage().data_ptr()
        for image, label, number in zip(images, labels.tolist(), source.tolist()):
            expected_source, index = order[got]
            image_there, label_there = sources[expected_source][index]     # each source's own transform
            assert number == expected_source and label == label_there
            assert torch.equal(image, image_there)
            assert (label >= 100) == (number == 1)
            got += 1
    assert got == 64


@pytest.mark.parametrize("samples", [
    [(torch.ones(2), 3), (torch.zeros(2), 4)],                  # int labels: one storage with the sources
    [(torch.ones(2), True), (torch.zeros(2), False)],           # bools stay bools
    [(torch.ones(2), 0.5), (torch.zeros(2), 1)],                # floats stay float64
    [(torch.ones(2), torch.tensor(1)), (torch.zeros(2), torch.tensor(2))],
    [(7,), (8,)],                                               # unlabeled ints: one storage too
    [(torch.ones(2),), (torch.zeros(2),)],
    [("a", 1, "k0"), ("b", 2, "k1")],                           # return_key: the key sits before the source
])
def test_tagged_samples_collate_as_torchs_default_collate_does(samples: list) -> None:
    from torch.utils.data import default_collate
    from shardkit.read.tagging import tagged
    got = default_collate([tagged(sample, number) for number, sample in enumerate(samples)])
    expected = default_collate([(*sample, number) for number, sample in enumerate(samples)])
    assert type(got) is type(expected) and len(got) == len(expected)
    for mine, torchs in zip(got, expected):
        assert type(mine) is type(torchs)
        if isinstance(torchs, torch.Tensor):
            assert mine.dtype == torchs.dtype and torch.equal(mine, torchs)
        else:
            assert mine == torchs
    labels, sources = got[-2:]
    shared = isinstance(labels, torch.Tensor) and \
        labels.untyped_storage().data_ptr() == sources.untyped_storage().data_ptr()
    assert shared == all(type(sample[-1]) is int for sample in samples)
    with pytest.raises(ValueError, match="Overflow"):                          # as torch's: a label beyond int64
        default_collate([tagged((torch.ones(2), 2 ** 70), 0)])
    with pytest.raises(RuntimeError, match="equal size"):
        default_collate([tagged((torch.ones(2), 1), 0), tagged(5, 1)])          # a labeled and an unlabeled source


def test_a_mixed_batch_imports_nothing_a_forked_worker_would_import_every_epoch(
        two_datasets: Dict[str, Path]) -> None:
    """A worker forked before the main process computed its first epoch order reads its first mixed
    batch without importing a lazily imported numpy module (np.unique's numpy.ma: 60-190 ms)."""
    paths = [str(two_datasets[name]) for name in ("shapes", "two")]
    setup = (f"import shardkit\nsources = [shardkit.open_dataset(p, decode='tensor') for p in {paths!r}]\n"
             "mixed = shardkit.MixedDataset(sources, weights=[1, 1], num_samples=40)")
    assert_imports_no_numpy_module(setup, "assert len(mixed.__getitems__([0, 45, 3, 41, 60, 2])) == 6")


def test_stateful_dataloader_resumes_a_mixed_epoch_exactly(two_datasets: Dict[str, Path]) -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> StatefulDataLoader:
        mixed = shardkit.MixedDataset(_sources_of(two_datasets), weights=[3, 1], num_samples=50, seed=2,
                                      replacement=[False, True])
        mixed.sampler.set_epoch(4)
        return StatefulDataLoader(mixed, batch_size=4, sampler=mixed.sampler, num_workers=2,
                                  collate_fn=lambda batch: [(int(label), int(source)) for _, label, source in batch])

    whole = [item for batch in loader() for item in batch]
    first, head = loader(), []
    for number, batch in enumerate(first):
        head += batch
        if number == 5:
            break
    state = first.state_dict()
    again = loader()
    again.load_state_dict(state)
    assert head + [item for batch in again for item in batch] == whole
    assert len(whole) == 50 and np.mean([source for _, source in whole]) == pytest.approx(12 / 50)
