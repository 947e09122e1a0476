"""Source: the items of SRC, in a deterministic order, and how to encode a range of them."""
from __future__ import annotations

import abc
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..errors import ConversionError
from ..options import PlanOptions, RunOptions, SourceOptions
from ..records import Encoded
from ..schema import SampleSchema


@dataclass(frozen=True)
class Skipped:
    """An input item that could not become a sample, and why (one skipped.jsonl line)."""

    path: str
    reason: str
    line: Optional[int] = None

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready, without empty fields."""
        return {key: value for key, value in asdict(self).items() if value is not None}

    def message(self) -> str:
        """One readable line naming the file (and line)."""
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.reason}"

    def failure(self, why: str) -> ConversionError:
        """The error that stops a conversion at this input (why: e.g. "--on-error fail")."""
        return ConversionError(f"{self.reason} ({why})", path=self.path, line=self.line)


@dataclass(frozen=True)
class Converted:
    """An input item turned into a sample, with what the summary counts about it."""

    sample: Encoded
    source_bytes: int = 0
    tag: Optional[str] = None   # e.g. the detected image format, counted in the summary


@dataclass(frozen=True)
class ConvertedRun:
    """Consecutive input items all turned into samples, handed over at once so that sources
    producing many small samples (CSV rows, image files) do not pay a Python object and a sink
    step per item."""

    samples: Sequence[Encoded]  # EncodedRows, or a list of Encoded
    source_bytes: int = 0       # of the whole run
    tags: Sequence[str] = ()    # one per sample (as Converted.tag), or none at all


Outcome = Union[Converted, ConvertedRun, Skipped]
#: The bytes samples of these estimated sizes take in a shard (the format's ShardFormat.sample_bytes).
SampleBytes = Callable[[np.ndarray], np.ndarray]


def _as_is(sizes: np.ndarray) -> np.ndarray:
    return sizes


class Source(abc.ABC):
    """The items of one SRC. Picklable: worker processes receive it once."""

    kind: str = ""
    #: The typed options this kind of source takes (see options.py).
    options_class: Type[SourceOptions] = SourceOptions
    #: The --order used when none is given (see docs/cli.md: shuffled, except for CSV tables).
    default_order: str = "shuffled"
    schema: SampleSchema
    classes: List[str]

    @classmethod
    @abc.abstractmethod
    def claims(cls, src: str, source_options: Dict[str, Any]) -> bool:
        """Whether SRC (an existing path) is of this kind."""

    @classmethod
    @abc.abstractmethod
    def open(cls, src: str, options: Any, run: RunOptions) -> "Source":
        """Scan SRC with this kind's options (an instance of options_class)."""

    @classmethod
    def open_onto(cls, src: str, options: Any, run: RunOptions, onto: Any) -> "Source":
        """open(), for items that join the dataset whose Manifest is `onto` (convert --append, repair of
        an append): sources whose encoding the dataset records (tables) take it from there."""
        return cls.open(src, options, run)

    #: Whether choose() drew with --seed (then --seed is not refused in source order).
    uses_seed: bool = False

    def choose(self, plan: PlanOptions) -> None:
        """Take the plan options that choose which items are converted; called once, after open and
        before planning. A re-shard's --fraction draws by --seed; other sources choose nothing."""

    @abc.abstractmethod
    def item_sizes(self) -> np.ndarray:
        """Estimated stored bytes of each item (payload and key), in item order (for --shard-size)."""

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int],
                    order: Optional[np.ndarray] = None,
                    sample_bytes: SampleBytes = _as_is) -> List[Tuple[int, int]]:
        """Ranges [start, stop) of positions in the planned order (items in source order, or
        order[position] when given), one per shard, each taking at most max_bytes as the format
        stores it (sample_bytes). Sources whose items are too many to list (CSV rows) override
        this with their own deterministic cut."""
        from ..writing.plan import cut_shards
        sizes = sample_bytes(self.item_sizes())
        return cut_shards(sizes if order is None else sizes[order], max_bytes, max_items)

    @abc.abstractmethod
    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        """Encoded samples (or Skipped) for items [start, stop), in order."""

    def encode_items(self, items: np.ndarray) -> Iterator[Outcome]:
        """One outcome per item of `items` (item numbers), in that order.

        A contiguous ascending run goes to encode_range. Any other set is served by encoding
        the range that covers it once and keeping the items asked for, in memory (one shard's
        worth); sources with cheap random access (image files) override this.
        """
        items = np.asarray(items, dtype=np.int64)
        if not len(items):
            return
        first, last = int(items.min()), int(items.max())
        if last - first + 1 == len(items) and bool(np.all(np.diff(items) == 1)):
            yield from self.encode_range(first, last + 1)
            return
        wanted = set(items.tolist())
        kept: Dict[int, Outcome] = {}
        position = first
        for outcome in self.encode_range(first, last + 1):
            if isinstance(outcome, ConvertedRun):
                share = outcome.source_bytes // max(1, len(outcome.samples))
                tags: Sequence[Optional[str]] = outcome.tags or [None] * len(outcome.samples)
                for offset, (sample, tag) in enumerate(zip(outcome.samples, tags)):
                    if position + offset in wanted:
                        kept[position + offset] = Converted(sample, share, tag)
                position += len(outcome.samples)
                continue
            if position in wanted:
                kept[position] = outcome
            position += 1
        for item in items.tolist():
            yield kept.pop(item)

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """A digest of everything the output depends on, to refuse resuming on a changed SRC."""

    def estimated_bytes(self) -> int:
        """Estimated total stored bytes (formats may size options from it)."""
        return int(self.item_sizes().sum())

    def summary(self) -> Dict[str, Any]:
        """Plan-time facts about SRC for the manifest's source summary (files seen, ...)."""
        return {}

    def empty_hint(self) -> str:
        """What to do when SRC yields no item ("" when there is no better advice)."""
        return ""

    def plan_skipped(self) -> List[Skipped]:
        """Items rejected while scanning (broken links, ...), reported in skipped.jsonl."""
        return []

    def item_keys(self) -> Optional[List[str]]:
        """The key of each item before it is encoded, for `convert --append` (None: this kind of
        source cannot be appended to a dataset)."""
        return None

    def held_items(self, manifest: Any) -> Optional[np.ndarray]:
        """The items whose key the dataset of `manifest` may hold already (None: any of them); an
        append reads the dataset's keys only when some item may be there."""
        return None

    def restrict(self, items: np.ndarray, classes: List[str]) -> None:
        """Keep only these items (an append's new inputs), labelled by their class's number in
        classes (the dataset's classes, then SRC's new ones); only sources with item_keys()."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the scan left for the conversion (temporary files); the source is done."""
