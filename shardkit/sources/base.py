"""Source: the items of SRC, in a deterministic order, and how to encode a range of them."""
from __future__ import annotations

import abc
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

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


@dataclass(frozen=True)
class Converted:
    """An input item turned into a sample, with what the summary counts about it."""

    sample: Encoded
    source_bytes: int = 0
    tag: Optional[str] = None   # e.g. the detected image format, counted in the summary


@dataclass(frozen=True)
class ConvertedRun:
    """Consecutive input items all turned into samples, handed over at once so that sources
    producing many small samples (CSV rows) do not pay a Python object and a sink step per item."""

    samples: List[Encoded]
    source_bytes: int = 0       # of the whole run


Outcome = Union[Converted, ConvertedRun, Skipped]
#: The bytes samples of these estimated sizes take in a shard (the format's ShardFormat.sample_bytes).
SampleBytes = Callable[[np.ndarray], np.ndarray]


def _as_is(sizes: np.ndarray) -> np.ndarray:
    return sizes


class Source(abc.ABC):
    """The items of one SRC. Picklable: worker processes receive it once."""

    kind: str = ""
    schema: SampleSchema
    classes: List[str]

    @abc.abstractmethod
    def item_sizes(self) -> np.ndarray:
        """Estimated stored bytes of each item (payload and key), in item order (for --shard-size)."""

    def plan_ranges(self, max_bytes: Optional[int], max_items: Optional[int],
                    sample_bytes: SampleBytes = _as_is) -> List[Tuple[int, int]]:
        """Item ranges [start, stop), one per shard, each taking at most max_bytes as the format
        stores it (sample_bytes). Sources whose items are too many to list (CSV rows) override
        this with their own deterministic cut."""
        from ..plan import cut_shards
        return cut_shards(sample_bytes(self.item_sizes()), max_bytes, max_items)

    @abc.abstractmethod
    def encode_range(self, start: int, stop: int) -> Iterator[Outcome]:
        """Encoded samples (or Skipped) for items [start, stop), in order."""

    @abc.abstractmethod
    def fingerprint(self) -> str:
        """A digest of everything the output depends on, to refuse resuming on a changed SRC."""

    def estimated_bytes(self) -> int:
        """Estimated total stored bytes (formats may size options from it)."""
        return int(self.item_sizes().sum())

    def summary(self) -> Dict[str, Any]:
        """Plan-time facts about SRC for the manifest's source summary (files seen, ...)."""
        return {}

    def plan_skipped(self) -> List[Skipped]:
        """Items rejected while scanning (broken links, ...), reported in skipped.jsonl."""
        return []

    def close(self) -> None:
        """Release what the scan left for the conversion (temporary files); the source is done."""
