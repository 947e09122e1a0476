"""The plan: a pure function of the source's items and the options — which items go in which shard.

Parallel workers, --part, --resume and merge all rely on it being deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..errors import UsageError
from ..order import seeded_permutation


@dataclass(frozen=True)
class ShardTask:
    """One shard to write: its global number and the [start, stop) range of source items."""

    shard: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        """shard-00000 style stem used for the file and its journal entry."""
        return shard_stem(self.shard)


def shard_stem(number: int) -> str:
    """File stem of shard number (five digits, more when needed)."""
    return f"shard-{number:05d}"


def cut_shards(sizes: np.ndarray, max_bytes: Optional[int], max_items: Optional[int]) -> List[Tuple[int, int]]:
    """Cut items (with their byte sizes) into consecutive [start, stop) ranges.

    A range holds at most max_items items and at most max_bytes bytes, except that a single
    item larger than max_bytes gets a range of its own.
    """
    count = len(sizes)
    ranges: List[Tuple[int, int]] = []
    if count == 0:
        return ranges
    if max_bytes is None:
        step = max_items or count
        return [(start, min(start + step, count)) for start in range(0, count, step)]
    cumulative = np.cumsum(np.asarray(sizes, dtype=np.int64))
    start = 0
    while start < count:
        base = cumulative[start - 1] if start else 0
        stop = int(np.searchsorted(cumulative, base + max_bytes, side="right"))
        stop = max(stop, start + 1)
        if max_items:
            stop = min(stop, start + max_items)
        ranges.append((start, min(stop, count)))
        start = stop
    return ranges


def make_tasks(ranges: List[Tuple[int, int]], part: Optional[Tuple[int, int]] = None) -> List[ShardTask]:
    """ShardTasks for the ranges; with part=(I, N), only the I-th of N contiguous blocks of shards."""
    tasks = [ShardTask(number, start, stop) for number, (start, stop) in enumerate(ranges)]
    if part is None:
        return tasks
    index, count = part
    total = len(tasks)
    return tasks[index * total // count:(index + 1) * total // count]


def sample_order(kind: str, seed: Optional[int], seed_used: bool = False) -> Dict[str, Any]:
    """The manifest's record of the sample order: {"kind": "shuffled", "seed": N} or {"kind": "source"}.
    seed_used: the source drew with the seed (a re-shard's --fraction), so source order takes it too."""
    if kind == "source":
        if seed is not None and not seed_used:
            raise UsageError("--seed applies to --order shuffled only (and to a re-shard's --fraction; this "
                             "source is written in source order unless --order shuffled is given)")
        return {"kind": "source"}
    return {"kind": "shuffled", "seed": int(seed or 0)}


def planned_order(count: int, order: Dict[str, Any]) -> Optional[np.ndarray]:
    """Source item of each plan position for a shuffled order (a seeded permutation of the
    count items, see order.py); None for source order (position p is item p)."""
    if order["kind"] == "source":
        return None
    return seeded_permutation(count, order["seed"])
