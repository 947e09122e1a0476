"""MixedDataset: several datasets read as one, each source's share of every epoch set by a weight.

Each epoch takes exactly counts[s] samples from source s: the weights apportioned over the epoch's
length (largest remainders), so the shares are exact per epoch, not only in expectation. Which
source serves each position of the epoch is a seeded shuffle of those counts. Within a source,
samples come from an endless stream of seeded passes (each pass a permutation of the source), and
epoch e takes the stream's positions [e * count, (e + 1) * count): a source read at less than its
length sees every sample once before any repeats, across epochs; one read at more than its length
repeats each sample as evenly as can be. With replacement a source's draws are independent and
uniform instead. Everything is a pure function of (seed, epoch): the sampler (MixedSampler, an
EpochSampler) computes the order in the main process, the dataset in a worker only reads.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch.utils.data

from ..errors import UsageError
from ..order import seed_key, seeded_permutation, splitmix64
from .epochs import EpochSampler, replica_and_rank
from .indices import distinct, sample_index, sample_indices
from .tagging import SOURCE_KEY, tagged

#: Mixed into every seed of this module, so a mixture's orders differ from a sampler's with the same seed.
_MIX = 0x4D49_58ED


class MixedDataset(torch.utils.data.Dataset):
    """Sources mixed by weight: read it through its own sampler, `DataLoader(mixed,
    sampler=mixed.sampler, ...)`. `mixed[i]` is sample i of the sources laid end to end (as in a
    ConcatDataset: source s starts at `offsets[s]`), which is what the sampler yields; a sample is
    its source's sample with the source's number added: `(x, y)` becomes `(x, y, source)`, an
    unlabeled `x` becomes `(x, source)`, a dict gains `"__source__"`, so torch's default collate
    gives each batch a tensor of source numbers. It has no len(): a DataLoader without its sampler
    would read the sources end to end, unweighted, so that is refused.

    Args:
        datasets: the sources, any sized map-style datasets (each keeps its classes and transforms).
        weights: each source's share of an epoch (normalised); default: proportional to length.
        seed: the seed of every epoch's order.
        num_samples: samples per epoch over all ranks; default: the sources' total length.
        epoch_source: instead of num_samples, end the epoch once this source (by number) has been
            read once whole; the others take their weight's share of that.
        replacement: per source (or one for all): draw with replacement instead of in passes.
        num_replicas: DDP ranks (default from torch.distributed), as ShardAwareSampler takes them.
        rank: this process's rank (default from torch.distributed).
        drop_last: cut the epoch's tail instead of padding it to equal rank blocks.
    """

    def __init__(self, datasets: Sequence[Any], weights: Optional[Sequence[float]] = None, seed: int = 0,
                 num_samples: Optional[int] = None, epoch_source: Optional[int] = None,
                 replacement: Union[bool, Sequence[bool]] = False, num_replicas: Optional[int] = None,
                 rank: Optional[int] = None, drop_last: bool = False) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise UsageError("MixedDataset needs at least one dataset")
        self.lengths = np.array([len(dataset) for dataset in self.datasets], dtype=np.int64)
        #: Where each source starts among the sources laid end to end (and, last, their total).
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)]).astype(np.int64)
        self.weights = _weights(weights, self.lengths)
        self.replacement = _per_source(replacement, len(self.datasets))
        self.counts = epoch_counts(self.lengths, self.weights, num_samples, epoch_source)
        empty = [number for number in range(len(self.datasets)) if self.counts[number] and not self.lengths[number]]
        if empty:
            raise UsageError(f"source {empty[0]} is empty but has a weight above 0")
        num_replicas, rank = replica_and_rank(num_replicas, rank)
        #: The sampler that yields this mixture's samples (indices into the sources end to end), epoch by epoch.
        self.sampler = MixedSampler(self, seed, num_replicas, rank, drop_last)

    @property
    def classes(self) -> List[Optional[List[str]]]:
        """Each source's class names (None for a source without them), by source number."""
        return [getattr(dataset, "classes", None) for dataset in self.datasets]

    @property
    def num_samples(self) -> int:
        """Samples per epoch over all ranks (len(mixed.sampler) is this rank's share)."""
        return int(self.counts.sum())

    def __len__(self) -> int:
        raise UsageError("a MixedDataset is read through its sampler, DataLoader(mixed, sampler=mixed.sampler, "
                         "...); its epoch has mixed.num_samples samples")

    def __bool__(self) -> bool:
        return True

    def __getitem__(self, index: Any) -> Any:
        source, local = self.locate(index)
        return tagged(self.datasets[source][local], source)

    def __getitems__(self, indices: Sequence[Any]) -> List[Any]:
        """A batch in the order asked; each source's part read in one call (its __getitems__)."""
        wanted = sample_indices(indices, int(self.offsets[-1]))
        sources = np.searchsorted(self.offsets, wanted, side="right") - 1
        out: List[Any] = [None] * len(wanted)
        for source in distinct(sources).tolist():
            positions = np.flatnonzero(sources == source)
            dataset = self.datasets[source]
            local = (wanted[positions] - self.offsets[source]).tolist()
            getitems = getattr(dataset, "__getitems__", None)
            samples = getitems(local) if getitems is not None else [dataset[index] for index in local]
            for position, sample in zip(positions.tolist(), samples):
                out[position] = tagged(sample, source)
        return out

    def locate(self, index: Any) -> Tuple[int, int]:
        """(source, index within it) of an index into the sources laid end to end."""
        position = sample_index(index, int(self.offsets[-1]))
        source = int(np.searchsorted(self.offsets, position, side="right")) - 1
        return source, position - int(self.offsets[source])

    def __repr__(self) -> str:
        shares = ", ".join(f"{count}/{length}" for count, length in zip(self.counts.tolist(), self.lengths.tolist()))
        return f"MixedDataset({len(self.datasets)} sources, samples per epoch / length: {shares})"


class MixedSampler(EpochSampler):
    """A MixedDataset's epochs (indices into its sources laid end to end), cut into rank blocks;
    resumable on the same or another number of ranks (see EpochSampler)."""

    def __init__(self, mixed: MixedDataset, seed: int, num_replicas: int, rank: int, drop_last: bool) -> None:
        super().__init__(mixed, mixed.num_samples, seed, num_replicas, rank, drop_last)
        self.lengths, self.counts, self.replacement = mixed.lengths, mixed.counts, mixed.replacement
        self.offsets = mixed.offsets

    def identity(self) -> Dict[str, Any]:
        return {**super().identity(), "mixture": {"lengths": self.lengths.tolist(), "counts": self.counts.tolist(),
                                                  "replacement": list(self.replacement)}}

    def epoch_order(self) -> np.ndarray:
        """The epoch's samples over all ranks, as indices into the sources laid end to end."""
        sources = np.repeat(np.arange(len(self.counts), dtype=np.int64), self.counts)
        sources = sources[seeded_permutation(len(sources), (self.seed, self.epoch, _MIX))]
        order = np.empty(len(sources), dtype=np.int64)
        for source in range(len(self.counts)):
            order[sources == source] = self.offsets[source] + self.draws(source, self.epoch)
        return order

    def draws(self, source: int, epoch: int) -> np.ndarray:
        """The indices source `source` serves in epoch `epoch`, in order."""
        count, length = int(self.counts[source]), int(self.lengths[source])
        positions = np.arange(epoch * count, (epoch + 1) * count, dtype=np.int64)
        if self.replacement[source]:
            with np.errstate(over="ignore"):
                keys = splitmix64(positions.astype(np.uint64) + np.uint64(seed_key((self.seed, _MIX, source))))
            return (keys % np.uint64(length)).astype(np.int64)
        passes = positions // max(length, 1)
        out = np.empty(count, dtype=np.int64)
        for number in np.unique(passes).tolist():
            here = passes == number
            out[here] = self.pass_order(source, number)[positions[here] % length]
        return out

    def pass_order(self, source: int, number: int) -> np.ndarray:
        """Pass `number` of a source drawn without replacement: a seeded permutation, except that
        where the pass begins inside an epoch that also ends the previous pass, samples of its
        head that epoch already took from the previous pass's tail are swapped with later ones
        (never with its own tail, so every pass stays a closed form of the seed). No sample is
        then read twice in one epoch, wherever later samples to swap with exist (an epoch taking
        at most 2/5 of the source)."""
        count, length = int(self.counts[source]), int(self.lengths[source])
        order = seeded_permutation(length, (self.seed, _MIX, source, number))
        start = number * length
        tail = start % count if 0 < count <= length and number else 0     # the previous pass's part of that epoch
        if not tail:
            return order
        head = count - tail
        taken = seeded_permutation(length, (self.seed, _MIX, source, number - 1))[length - tail:]
        clash = np.flatnonzero(np.isin(order[:head], taken))
        own_tail = (start + length) % count
        spare = head + np.flatnonzero(~np.isin(order[head:length - own_tail], taken))
        swaps = min(len(clash), len(spare))
        first, second = clash[:swaps], spare[:swaps]
        order[first], order[second] = order[second], order[first].copy()
        return order


def epoch_counts(lengths: np.ndarray, weights: np.ndarray, num_samples: Optional[int],
                 epoch_source: Optional[int]) -> np.ndarray:
    """Samples each source serves per epoch: num_samples (default: the total length) apportioned by
    weight (largest remainders, ties to the lower source number); with epoch_source, that source's
    whole length and the others' shares of it (rounded half up)."""
    if epoch_source is not None:
        if num_samples is not None:
            raise UsageError("give num_samples or epoch_source, not both")
        if not 0 <= epoch_source < len(lengths) or not weights[epoch_source]:
            raise UsageError(f"epoch_source must name a source with a weight above 0, not {epoch_source}")
        scale = lengths[epoch_source] / weights[epoch_source]
        counts = np.floor(weights * scale + 0.5).astype(np.int64)
        counts[epoch_source] = lengths[epoch_source]
        return counts
    total = int(lengths.sum()) if num_samples is None else int(num_samples)
    if total < 0:
        raise UsageError(f"num_samples must be 0 or more, not {num_samples}")
    exact = weights * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    counts[np.argsort(-(exact - counts), kind="stable")[:short]] += 1
    return counts


def _weights(weights: Optional[Sequence[float]], lengths: np.ndarray) -> np.ndarray:
    """Weights normalised to sum to 1 (default: proportional to the sources' lengths)."""
    raw = lengths.astype(np.float64) if weights is None else np.asarray(list(weights), dtype=np.float64)
    if raw.shape != lengths.shape:
        raise UsageError(f"{len(raw)} weights for {len(lengths)} datasets")
    if not np.all(np.isfinite(raw)) or np.any(raw < 0) or not raw.sum() > 0:
        raise UsageError(f"weights must be finite, 0 or more, and not all 0: {raw.tolist()}")
    return raw / math.fsum(raw.tolist())


def _per_source(value: Union[bool, Sequence[bool]], count: int) -> List[bool]:
    flags = [bool(value)] * count if isinstance(value, (bool, np.bool_)) else [bool(v) for v in value]
    if len(flags) != count:
        raise UsageError(f"{len(flags)} replacement flags for {count} datasets")
    return flags


__all__ = ["MixedDataset", "MixedSampler", "SOURCE_KEY", "epoch_counts"]
