"""Laws of the conversion order and the split helper: seeded permutations, encode_items, random_split."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest
import torch.utils.data
from hypothesis import given, settings
from hypothesis import strategies as st

import shardkit
from shardkit.order import seeded_permutation
from shardkit.records import Encoded
from shardkit.sources.base import ConvertedRun, Outcome, Skipped, Source


@settings(max_examples=60, deadline=None)
@given(count=st.integers(0, 3000), seed=st.integers(0, 2**63 - 1))
def test_seeded_permutation_is_a_permutation_fixed_by_its_seed(count, seed) -> None:
    order = seeded_permutation(count, seed)
    assert order.dtype == np.int64 and sorted(order.tolist()) == list(range(count))
    assert np.array_equal(order, seeded_permutation(count, seed))
    if count > 20:
        assert not np.array_equal(order, seeded_permutation(count, seed + 1))
        assert not np.array_equal(order, np.arange(count))


def test_seeded_permutation_values_are_pinned() -> None:
    """The order is part of the on-disk contract (formats/manifest.md): it must never change."""
    assert seeded_permutation(10, 0).tolist() == [5, 7, 1, 4, 2, 8, 0, 6, 3, 9]
    assert seeded_permutation(10, (0, 1)).tolist() == [4, 0, 1, 8, 5, 7, 9, 3, 2, 6]
    with pytest.raises(ValueError):
        seeded_permutation(3, -1)


class RowsSource(Source):
    """Items 0..n-1 encoded in runs of 4 (like CSV rows); every 7th item is a bad row."""

    def __init__(self, count: int) -> None:
        self.count = count

    @classmethod
    def claims(cls, src: str, source_options: dict) -> bool:
        return False

    @classmethod
    def open(cls, src: str, options: object, run: object) -> "RowsSource":
        raise NotImplementedError("made directly by the tests")

    def item_sizes(self) -> np.ndarray:
        return np.ones(self.count, dtype=np.int64)

    def fingerprint(self) -> str:
        return "rows"

    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        run = []
        for item in range(start, stop):
            if item % 7 == 6:
                if run:
                    yield ConvertedRun(run, 10 * len(run))
                    run = []
                yield Skipped("rows.csv", "bad row", line=item + 2)
                continue
            run.append(Encoded.make(str(item).encode(), item % 3))
            if len(run) == 4:
                yield ConvertedRun(run, 40)
                run = []
        if run:
            yield ConvertedRun(run, 10 * len(run))


def _items_of(outcomes) -> list:
    """The item number behind each sample or skipped row, runs expanded."""
    items = []
    for outcome in outcomes:
        if isinstance(outcome, Skipped):
            items.append(outcome.line - 2)
        elif isinstance(outcome, ConvertedRun):
            items.extend(int(bytes(sample.payload)) for sample in outcome.samples)
        else:
            items.append(int(bytes(outcome.sample.payload)))
    return items


@settings(max_examples=60, deadline=None)
@given(count=st.integers(1, 200), seed=st.integers(0, 1000), data=st.data())
def test_encode_items_gives_one_outcome_per_item_in_the_order_asked(count, seed, data) -> None:
    source = RowsSource(count)
    start = data.draw(st.integers(0, count - 1))
    stop = data.draw(st.integers(start + 1, count))
    items = seeded_permutation(count, seed)[start:stop]
    assert _items_of(source.encode_items(items)) == items.tolist()
    assert _items_of(source.encode_items(np.arange(start, stop))) == list(range(start, stop))
    if stop - start >= 2:
        assert _items_of(source.encode_items(np.array([stop - 1, start]))) == [stop - 1, start]


@settings(max_examples=60, deadline=None)
@given(total=st.integers(0, 500), seed=st.integers(0, 1000), fractions=st.sampled_from(
    [[0.9, 0.1], [0.5, 0.5], [0.7, 0.2, 0.1], [1.0], [0.0, 1.0]]))
def test_random_split_is_a_deterministic_partition(total, seed, fractions) -> None:
    data = list(range(total))
    parts = shardkit.random_split(data, fractions, seed=seed)
    assert all(isinstance(part, torch.utils.data.Subset) for part in parts)
    indices = [index for part in parts for index in part.indices]
    assert sorted(indices) == data
    assert all(part.indices == sorted(part.indices) for part in parts)
    assert all(abs(len(part) - fraction * total) <= len(parts) for part, fraction in zip(parts, fractions))
    assert [part.indices for part in shardkit.random_split(data, fractions, seed=seed)] == \
        [part.indices for part in parts]


def test_split_lengths_and_bad_arguments() -> None:
    train, val = shardkit.random_split(list(range(10)), [7, 3], seed=1)
    assert (len(train), len(val)) == (7, 3)
    train, val = shardkit.train_val_split(list(range(10)), val_fraction=0.2)
    assert (len(train), len(val)) == (8, 2)
    for bad in ([5, 6], [0.5, 0.6], [-1, 11]):
        with pytest.raises(shardkit.UsageError):
            shardkit.random_split(list(range(10)), bad)
    with pytest.raises(shardkit.UsageError):
        shardkit.train_val_split(list(range(10)), val_fraction=1.5)
